"""Write tests/suite_weights.json (seconds per test file) from a one-process run's JUnit XML.

The table only orders the work units of the parallel suite, longest first (tests/suite_schedule.py);
refresh it when files grow or move:

    .venv/bin/python -m pytest -n 0 --junitxml=/tmp/suite.xml
    .venv/bin/python scripts/suite_weights.py /tmp/suite.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "tests" / "suite_weights.json"


def seconds_per_file(junit_xml: Path) -> dict[str, float]:
    """Setup, call and teardown seconds of every test case, summed per test file."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit_xml).iter("testcase"):
        module = case.get("classname", "").split(".")
        name = next((part for part in module if part.startswith("test_")), None)
        if name is not None:
            totals[f"{name}.py"] += float(case.get("time", "0"))
    return {name: round(seconds, 1) for name, seconds in sorted(totals.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    table = seconds_per_file(Path(argv[0]))
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{TABLE}: {len(table)} files, {sum(table.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
