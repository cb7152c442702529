"""The README's notebook example runs as written and its test command is the one CI runs."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_readme_example_runs(tmp_path):
    code = re.search(r"## In a notebook\n\n```python\n(.*?)```", README, re.S).group(1)
    code = code.replace("result[0], result.logs[1], result.metrics[:3]", "")
    code += "\nassert len(result) == 2 and result[0].numel() == 64\nassert 'epoch 2' in result.logs[0]\n"
    code += "assert {m['rank'] for m in result.metrics} == {0, 1}\nprint('README OK')\n"
    script = tmp_path / "example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[rank0] epoch 2: loss" in out.stdout and "README OK" in out.stdout


def test_ci_runs_exactly_the_readme_commands():
    """README's two quick-start commands stand, as typed, as lines of .ci/run."""
    quick_start = README.split("## Quick start", 1)[1].split("##", 1)[0]
    first = re.search(
        r"^(bash scripts/install\.sh && \.venv/bin/python quickstart\.py)\s+# 1\.", quick_start, re.M
    )
    test_command = re.search(r"^(\.venv/bin/python -m pytest(?: -n auto)?)\s+# 2\.", quick_start, re.M)
    assert first and test_command, quick_start
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command.group(1) in ci
    assert any(line.startswith(first.group(1) + " ") or line == first.group(1) for line in ci)
