"""Each extra alone, as a user installs it: the wheel built once, then per extra a fresh venv with
torch, the wheel and that extra only, and tests/installed_smoke.py's check of what it enables.

Run by .ci/run after the suite (one venv per extra is too slow for the suite's budget), as a gate:
`python scripts/check_extras.py [deepspeed ray slurm notebooks]`. Exit status 1 names each failure.
Each extra installs under .ci/extras-constraints.txt's pins (updated on purpose), so a new upstream
release cannot fail CI by surprise; the wheel is the suite's (NOTEBOOK_LAUNCHER_DIST) when set.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fresh_venv import build, make_venv, smoke  # noqa: E402

EXTRAS = ("deepspeed", "ray", "slurm", "notebooks")
PINS = Path(__file__).resolve().parent.parent / ".ci" / "extras-constraints.txt"


def main(extras: list[str]) -> int:
    os.environ.setdefault("NOTEBOOK_LAUNCHER_EXTRAS_CONSTRAINTS", str(PINS))
    failed = []
    with tempfile.TemporaryDirectory(prefix="nl-extras-") as scratch:
        start = time.monotonic()
        _, wheel = build(Path(scratch) / "dist")
        print(f"built {wheel.name} in {time.monotonic() - start:.0f}s", flush=True)
        for extra in extras:
            start = time.monotonic()
            try:
                python = make_venv(Path(scratch) / extra, wheel, extra)
                installed = time.monotonic()
                print(smoke(python, extra).strip(), flush=True)
                print(
                    f"[{extra}] ok: venv {installed - start:.0f}s, smoke {time.monotonic() - installed:.0f}s",
                    flush=True,
                )
            except Exception as exc:  # noqa: BLE001  (report every extra, then fail)
                print(f"[{extra}] FAILED after {time.monotonic() - start:.0f}s: {exc}", flush=True)
                failed.append(extra)
    if failed:
        print(f"check_extras: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(EXTRAS)))
