"""Two `launch` invocations on one host act as two machines and form one world of size 2."""

from __future__ import annotations

import json

import pytest
from test_cli_helpers import cli_env, explain, finish, free_port, start_cli

WORLD_PROBE = """
import json, os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
report = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
report["sum"] = value.item()
report["machine"] = sys.argv[2]
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as fp:
    json.dump(report, fp)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["static", "c10d"])
def test_two_machines_on_one_host_form_one_world(tmp_path, backend):
    (tmp_path / "probe.py").write_text(WORLD_PROBE)
    port = free_port()
    env = cli_env(tmp_path)
    machines = []
    for machine_rank in (0, 1):
        args = [
            "launch", "--num_machines", "2", "--machine_rank", str(machine_rank), "--main_process_ip", "127.0.0.1",
            "--main_process_port", str(port), "--num_processes", "2", "--rdzv_backend", backend, "--cpu",
            "probe.py", str(tmp_path), str(machine_rank),
        ]  # fmt: skip
        machines.append(start_cli(args, cwd=tmp_path, env=env))
    results = [finish(proc, timeout=120) for proc in machines]
    for result in results:
        assert result.returncode == 0, explain(result)
    reports = {int(p.stem[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")}
    assert sorted(reports) == [0, 1], "\n".join(explain(r) for r in results)
    assert {r["machine"] for r in reports.values()} == {"0", "1"}  # one rank on each machine
    for rank, report in reports.items():
        assert (
            report["WORLD_SIZE"] == "2" and report["LOCAL_WORLD_SIZE"] == "1" and report["LOCAL_RANK"] == "0"
        )
        assert report["sum"] == 3.0  # 1 + 2: the all-reduce crossed both "machines"
        assert report["RANK"] == report["GROUP_RANK"] == str(rank)
        if backend == "static":  # static rendezvous keeps the machine ranks as given
            assert report["machine"] == str(rank)
