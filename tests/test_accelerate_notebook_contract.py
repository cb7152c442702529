"""The rest of Accelerate's notebook contract (issue 28): its own test_notebook.py and
test_ddp_comm_hook.py, unchanged, against our package; restarts after any failure; ChildFailedError;
log_line_prefix_template; DDP communication hooks; LocalSGD; write_basic_config."""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_cli_helpers import cli_env

from notebook_launcher.errors import AcceleratorError, ConfigError

RUNNER = str(Path(__file__).resolve().parent / "run_accelerate_script.py")


# Its test_fault_tolerant races by design: ranks test queue.empty() and then get() from a shared queue
# that never holds more than one item, and only the rank that takes the last 0 calls PartialState().
# Two endings of that race cannot pass under any launcher; ours must say which one happened:
# - both ranks see the one item: one takes it and waits in the rendezvous, the other blocks forever
#   in queue.get() (test_notebook.py line 44) — the stall report names both, the blocked one reading
#   the queue's pipe (about 1 run in 5 here);
# - the last restart's attempt starts on the 0: one rank takes it and waits in the rendezvous, the
#   other finds the queue empty and returns, so the group can never form — the launch fails at once
#   naming both ranks, with every restart used (seen in CI when no attempt took two items).
# The script runs once, with a short stall_timeout (from the config file): it passes, or it ends in
# one of those two, said as such.
STALL_TIMEOUT = 10
RACE_VERDICT = re.compile(
    r"Verdict: rank (?P<blocked>[01]) never joined the rendezvous \(init_process_group\), "
    r"which rank (?P<waiting>[01]) has waited in"
)

ORPHAN_VERDICT = re.compile(
    r"WorkerError: rank (?P<waiting>[01]) waited in the rendezvous \(init_process_group\), "
    r"but rank (?!(?P=waiting))[01] had already returned without joining it"
)


def _blocked_in_get(report: str, rank: str) -> bool:
    """That rank's section of the hang report says it is blocked reading a multiprocessing pipe (the
    queue's: Queue.get at test_notebook.py line 44 reads it; the report folds the library frames
    between, accelerate's and the standard library's, so the innermost frame is what it shows)."""
    return bool(
        re.search(
            rf"--- rank {rank}: at _recv \(connection\.py:\d+\)[^\n]*---\n"
            rf'.*\n\s+File ".*multiprocessing/connection\.py", line \d+ in _recv',
            report,
        )
    )


def _race_report(output: str) -> re.Match[str] | None:
    """The stall report's verdict when the run stands in the queue race (see above), else None."""
    report = output.partition("Hang report: no rank made progress")[2]
    verdict = RACE_VERDICT.search(report)
    if verdict is None or verdict["blocked"] == verdict["waiting"]:
        return None
    return verdict if _blocked_in_get(report, verdict["blocked"]) else None


def _orphaned_on_the_last_restart(output: str) -> bool:
    """test_fault_tolerant's other losing ending (see above): its error names a rank left alone in the
    rendezvous by a rank that returned, after all 3 restarts, and nothing after it ran."""
    fault_tolerant = output.partition("Test fault tolerant")[2]
    return (
        "Test monitoring" not in fault_tolerant
        and bool(ORPHAN_VERDICT.search(fault_tolerant))
        and "all 3 restart(s) (max_restarts=3) were used" in fault_tolerant
    )


def _run_until_done_or_raced(tmp_path: Path, deadline: float) -> tuple[int | None, str]:
    """(exit status, output) of test_notebook.py on 2 processes; None when it was stopped in the race,
    once the stall report showed it. Past the deadline the test fails with the output."""
    config = tmp_path / "config.yaml"
    config.write_text(f"stall_timeout: {STALL_TIMEOUT}\n")
    env = cli_env(
        tmp_path, OMP_NUM_THREADS="1", ACCELERATE_NUM_PROCESSES="2", NOTEBOOK_LAUNCHER_CONFIG_FILE=str(config)
    )
    log = tmp_path / "output.txt"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, RUNNER, "test_notebook.py"], cwd=tmp_path, env=env, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    start = time.monotonic()
    while proc.poll() is None:
        if _race_report(log.read_text()) is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, log.read_text()
        if time.monotonic() - start > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(
                f"test_notebook.py neither ended nor showed the race in {deadline} s:\n{log.read_text()}"
            )
        time.sleep(0.5)
    return proc.returncode, log.read_text()


@pytest.mark.slow
def test_accelerates_test_notebook_passes_or_names_its_queue_race(tmp_path):
    """All 7 of its tests with 2 processes (c10d, max_restarts after RuntimeErrors, ChildFailedError),
    run once: they pass, or test_fault_tolerant stands in its queue race and the stall report says so."""
    status, output = _run_until_done_or_raced(tmp_path, deadline=240)
    if status is None:
        assert "Test fault tolerant" in output and "Test monitoring" not in output, output
        return
    if status != 0 and _orphaned_on_the_last_restart(output):
        return
    assert status == 0, output
    for step in ("c10d rendezvous backend", "fault tolerant", "monitoring"):
        assert f"Test {step}" in output, output


def test_accelerates_ddp_comm_hook_passes_on_cpu():
    """Every hook but bf16 (CUDA only), with the reference DDP given device_ids=None on CPU
    (run_accelerate_script.cpu_adaptation); the ranks fork from here and alias `accelerate` there."""
    from run_accelerate_script import run_main

    from notebook_launcher import notebook_launch

    result = notebook_launch(
        run_main, args=("test_ddp_comm_hook.py", True), num_processes=2, use_cpu=True, quiet=True, timeout=240
    )
    for rank in (0, 1):
        for case in (
            "no, no",
            "fp16, no",
            "power_sgd, fp16",
            "batched_power_sgd, fp16",
            "power_sgd, no, {'matrix_approximation_rank': 2}",
        ):
            assert f"Passed: {case}" in result.logs[rank], result.logs[rank]
        assert result.logs[rank].count("Skipped on CPU") == 3, result.logs[rank]


# ------------------------------------------------------------------------------ launcher arguments
def _fails_first_attempt():
    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        raise ValueError("flaky data source")
    return int(os.environ["RANK"])


def test_max_restarts_restarts_after_any_failure_and_counts():
    from notebook_launcher import WorkerError, notebook_launch, notebook_launcher

    result = notebook_launcher(_fails_first_attempt, num_processes=2, max_restarts=2)
    assert list(result) == [0, 1] and result.restarts == 1
    with pytest.raises(WorkerError, match="restart_on='infrastructure'"):  # notebook_launch keeps its default
        notebook_launch(_fails_first_attempt, num_processes=1, max_restarts=2, quiet=True)


def test_a_failure_is_torch_elastics_child_failed_error():
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from notebook_launcher import WorkerError
    from notebook_launcher.launch.result import RankFailure

    failure = RankFailure(rank=1, exitcode=1, exc_type="RuntimeError", message="bad batch", traceback="Tb\n")
    error = WorkerError(failure, [RankFailure(rank=0, exitcode=-15)], {1: "log"}, {})
    assert isinstance(error, ChildFailedError) and isinstance(error, WorkerError)
    assert "rank 1 raised RuntimeError: bad batch" in str(error) and error.rank == 1
    assert error.get_first_failure()[0] == 1 and "Tb" in error.format_msg()
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error) and copy.logs == {1: "log"}
    first = re.sub(r"\x1b\[[0-9;]*m", "", error._render_traceback_()[0])  # coloured in a terminal only
    assert first.endswith("WorkerError: rank 1 raised RuntimeError: bad batch")


def test_the_public_face_stays_torch_free():
    code = "import sys, notebook_launcher, notebook_launcher.local_sgd; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_log_line_prefix_template_fills_torchruns_fields(capsys):
    from notebook_launcher.launch.cell.output import CellPrinter
    from notebook_launcher.launch.events import OutputLine, RunStarted

    printer = CellPrinter(template="[{role_name}{rank}|{local_rank}]: ")
    printer(RunStarted(4, (2, 3), "fork", None))
    printer(OutputLine(3, "stdout", "hello"))
    assert capsys.readouterr().out == "[default3|1]: hello\n"
    with pytest.raises(ConfigError, match=r"\{node\}.*torchrun's fields"):
        CellPrinter(template="{node}")


# ------------------------------------------------------------------------------------- DDP hooks
def test_a_bf16_hook_on_cpu_is_refused_with_the_reason():
    from notebook_launcher import DDPCommunicationHookType
    from notebook_launcher.runtime.strategies.comm_hooks import register_comm_hook

    for options in (
        {"comm_hook": DDPCommunicationHookType.BF16},
        {"comm_hook": "power_sgd", "comm_wrapper": "bf16"},
    ):
        with pytest.raises(AcceleratorError, match="BF16 cannot run on cpu.*NCCL"):
            register_comm_hook(torch.nn.Linear(1, 1), options, torch.device("cpu"))
    with pytest.raises(AcceleratorError, match="comm_wrapper='power_sgd'"):
        register_comm_hook(
            torch.nn.Linear(1, 1), {"comm_hook": "fp16", "comm_wrapper": "power_sgd"}, torch.device("cpu")
        )


# --------------------------------------------------------------------------------------- LocalSGD
STEPS, EVERY, LR = 5, 2, 0.1


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(4, 3, generator=gen, dtype=torch.float64), torch.randn(
        4, 1, generator=gen, dtype=torch.float64
    )


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1).double()


def _sgd_step(model: torch.nn.Module, rank: int, step: int) -> None:
    x, y = _batch(rank, step)
    torch.nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
            p.grad = None


def _local_sgd_train():
    from notebook_launcher import Accelerator
    from notebook_launcher.local_sgd import LocalSGD

    accelerator = Accelerator()
    model = accelerator.prepare(_model())
    seen = []
    with LocalSGD(accelerator, model, local_sgd_steps=EVERY) as local_sgd:
        for step in range(STEPS):
            _sgd_step(model, accelerator.process_index, step)
            local_sgd.step()
            seen.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    seen.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    return seen


def test_local_sgd_averages_every_k_steps_and_on_exit():
    from notebook_launcher import notebook_launch

    result = notebook_launch(_local_sgd_train, num_processes=2, quiet=True, timeout=120)
    models = [_model(), _model()]
    for step in range(STEPS):
        for rank, model in enumerate(models):
            _sgd_step(model, rank, step)  # each rank on its own data, no gradient all-reduce
        if (step + 1) % EVERY == 0 or step == STEPS - 1:  # averaged at steps 2 and 4, and on exit
            with torch.no_grad():
                for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
                    a.copy_((a + b) / 2)
                    b.copy_(a)
        for rank, model in enumerate(models):
            expected = torch.cat([p.detach().flatten() for p in model.parameters()])
            index = step if step < STEPS - 1 else STEPS  # the last step's averaging happens on exit
            torch.testing.assert_close(result[rank][index], expected, rtol=0, atol=1e-12)
    assert not torch.equal(result[0][0], result[1][0])  # not averaged in between


def test_local_sgd_refuses_sharded_models():
    from types import SimpleNamespace

    from notebook_launcher.runtime.local_sgd import LocalSGD

    with pytest.raises(AcceleratorError, match="distributed_type is FSDP.*shards"):
        LocalSGD(SimpleNamespace(distributed_type="FSDP"), torch.nn.Linear(1, 1), 2)


# ----------------------------------------------------------------------------- write_basic_config
def test_write_basic_config_writes_this_machines_config_once(tmp_path, monkeypatch):
    from notebook_launcher.config import load_config
    from notebook_launcher.utils import write_basic_config

    path = tmp_path / "cfg" / "default_config.yaml"
    assert write_basic_config(mixed_precision="bf16", save_location=str(path)) == path
    config = load_config(path)
    gpus = torch.cuda.device_count()
    assert (config.num_processes, config.use_cpu, config.mixed_precision) == (max(gpus, 1), gpus == 0, "bf16")
    assert config.distributed_type == ("MULTI_GPU" if gpus > 1 else "NO")
    before = path.read_text()
    assert write_basic_config(save_location=path) is False and path.read_text() == before
    from notebook_launcher import ConfigPanel
    from notebook_launcher.cli.resolve import read_config_file

    assert read_config_file(str(path))[0].mixed_precision == "bf16"  # what `launch --config_file` reads
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_CONFIG_FILE", str(path))
    assert ConfigPanel().config.mixed_precision == "bf16"  # the panel opens on the default file


def _one_rank_skips_the_group():
    if os.environ["RANK"] == "1":
        return "skipped"
    from notebook_launcher import PartialState

    return str(PartialState())


def test_a_rank_left_in_the_rendezvous_by_a_returned_peer_fails_instead_of_hanging():
    from notebook_launcher import WorkerError, notebook_launch

    with pytest.raises(WorkerError, match="rank 1 had already returned without joining it"):
        notebook_launch(_one_rank_skips_the_group, num_processes=2, quiet=True, timeout=60)
