"""What `notebook-launcher` prints (issue 11, section 7): every worker line with its rank, and a
`test` verdict that claims only what was tested."""

from __future__ import annotations

import re

import pytest
from test_cli_helpers import cli_env, explain, run_cli

TALKER = """
import os, sys
print(f"out of {os.environ['RANK']}", flush=True)
print(f"err of {os.environ['RANK']}", file=sys.stderr, flush=True)
"""


@pytest.mark.parametrize("prefix", [True, False])
def test_each_worker_line_carries_its_rank_unless_turned_off(tmp_path, prefix):
    (tmp_path / "talk.py").write_text(TALKER)
    temp = tmp_path / "tmp"
    temp.mkdir()
    args = ["launch", "--num_processes", "2", *([] if prefix else ["--rank_prefix", "false"]), "talk.py"]
    result = run_cli(args, cwd=tmp_path, env=cli_env(tmp_path, TMPDIR=str(temp)))
    assert result.returncode == 0, explain(result)
    for rank in (0, 1):
        if prefix:  # whole lines: torchrun copies each worker's output line by line
            assert f"[rank{rank}] out of {rank}\n" in result.stdout, explain(result)
            assert f"[rank{rank}] err of {rank}\n" in result.stderr, explain(result)
        else:  # the workers' own writes, a whole line each (cli/bootstrap.py whole_lines)
            assert f"out of {rank}\n" in result.stdout and f"err of {rank}\n" in result.stderr, explain(
                result
            )
    if not prefix:
        assert "[rank" not in result.stdout + result.stderr
    assert list(temp.iterdir()) == []  # torchrun's logs went to a temporary folder, removed afterwards


@pytest.mark.slow
def test_selftest_on_one_process_says_distributed_training_was_not_tested(tmp_path):
    result = run_cli(["test", "--num_processes", "1"], cwd=tmp_path, timeout=120)
    assert result.returncode == 0, explain(result)
    assert "notebook-launcher test: 1 process(es)" in result.stdout
    assert "distributed training was NOT tested" in result.stdout
    assert "distributed training works here" not in result.stdout


FLOOD = """
import os
rank = os.environ["RANK"]
for i in range(LINES):
    print(f"line {rank} {i} " + "x" * 50)
"""
LINES = 3000


@pytest.mark.parametrize("prefix", [True, False])
def test_no_line_of_one_rank_is_glued_to_anothers(tmp_path, prefix):
    """Both ranks print at once: every line reaches the console whole (a line is one write, however
    torchrun's --tee or the terminal reads it), so no rank's line ends inside another's."""
    (tmp_path / "flood.py").write_text(FLOOD.replace("LINES", str(LINES)))
    args = ["launch", "--num_processes", "2", *([] if prefix else ["--rank_prefix", "false"]), "flood.py"]
    result = run_cli(args, cwd=tmp_path, env=cli_env(tmp_path))
    assert result.returncode == 0, explain(result)
    pattern = re.compile(r"(\[rank([01])\] )?line ([01]) \d+ x{50}")
    lines = [line for line in result.stdout.splitlines() if "line " in line]
    broken = [line for line in lines if not pattern.fullmatch(line)]
    assert not broken, f"{len(broken)} of {len(lines)} lines broken, e.g. {broken[:3]}"
    assert len(lines) == 2 * LINES
    if prefix:
        assert all(m[2] == m[3] for m in map(pattern.fullmatch, lines))  # each line under its own rank
