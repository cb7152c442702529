"""notebook_launch inside a real Jupyter kernel: cells, output, interrupts, a clean kernel (issue 3)."""

import textwrap

import psutil
import pytest
from kernel_isolation import run_notebook
from kernel_session import code_cell, execute_notebook, new_notebook
from test_launch_kernel_errors import DEFINE as FAILING  # the same failing function as there

pytestmark = pytest.mark.slow

DEFINE = textwrap.dedent(
    """
    import torch, torch.nn as nn
    from torch.utils.data import Dataset, DataLoader
    from notebook_launcher import notebook_launch, Accelerator

    class CellModel(nn.Module):
        def __init__(self):
            super().__init__(); self.fc = nn.Linear(4, 1)
        def forward(self, x): return self.fc(x)

    class CellData(Dataset):
        def __len__(self): return 64
        def __getitem__(self, i):
            x = torch.full((4,), float(i) / 64)
            return x, x.sum(dim=0, keepdim=True)

    def train(epochs):
        acc = Accelerator()
        torch.manual_seed(0)
        model, opt, loader = acc.prepare(CellModel(), torch.optim.SGD(CellModel().parameters(), lr=0.1),
                                         DataLoader(CellData(), batch_size=8))
        opt = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
        for epoch in range(epochs):
            for x, y in loader:
                loss = nn.functional.mse_loss(model(x), y)
                acc.backward(loss); opt.step(); opt.zero_grad()
            print(f"epoch {epoch} rank {acc.process_index} loss {loss.item():.4f}", flush=True)
        return {"rank": acc.process_index, "world": acc.num_processes, "instance": type(model).__name__}
    """
)


def _run_notebook(cells, tmp_path, timeout=180):
    nb = new_notebook([code_cell(src) for src in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    execute_notebook(nb, tmp_path, timeout)
    return nb


def _text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_cells_define_everything_and_launch_returns_all_ranks(tmp_path, start_method):
    nb = _run_notebook(
        [
            DEFINE,
            f"result = notebook_launch(train, args=(2,), num_processes=2, start_method={start_method!r}, timeout=150)",
            "print(sorted(r['rank'] for r in result), [r['world'] for r in result], result.start_method)",
        ],
        tmp_path,
    )
    launch_out = _text(nb.cells[1])
    for rank in (0, 1):
        assert f"[rank{rank}] epoch 1 rank {rank} loss" in launch_out
    assert f"[0, 1] [2, 2] {start_method}" in _text(nb.cells[2])


def test_cuda_initialised_kernel_switches_to_the_warm_pool_and_says_so(tmp_path):
    nb = _run_notebook(
        [
            DEFINE,
            # Pretend this kernel already created a CUDA context (no GPU on CI machines).
            "import notebook_launcher.system.hardware as hw; hw.cuda_initialized = lambda: True",
            "result = notebook_launch(train, args=(1,), num_processes=2, timeout=150)",
            "print(result.start_method, [r['instance'] for r in result])",
        ],
        tmp_path,
    )
    assert "starting workers from a warm process server" in _text(nb.cells[2])
    assert "forkserver ['DistributedDataParallel', 'DistributedDataParallel']" in _text(nb.cells[3])


def test_explicit_fork_on_a_cuda_kernel_is_a_clear_error(tmp_path):
    nb = new_notebook(
        [
            code_cell(DEFINE),
            code_cell("import notebook_launcher.system.hardware as hw; hw.cuda_initialized = lambda: True"),
            code_cell("notebook_launch(train, args=(1,), num_processes=2, start_method='fork')"),
        ]
    )
    run_notebook(nb, str(tmp_path), timeout=120, allow_errors=True)
    errors = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    assert errors and errors[0].ename == "ConfigError"
    assert "start_method='fork' cannot be used" in errors[0].evalue and "spawn" in errors[0].evalue


def test_interrupting_the_kernel_stops_workers_and_next_launch_works(kernel):
    kernel.run(DEFINE)
    long_run = textwrap.dedent(
        """
        import time
        def forever():
            acc = Accelerator()
            print(f"started {acc.process_index}", flush=True)
            while True:
                time.sleep(0.1)
        notebook_launch(forever, num_processes=2)
        """
    )
    run = kernel.run(long_run, timeout=60, interrupt_after_output="[rank1] started 1")
    # LaunchInterrupted is the KeyboardInterrupt that also says where each rank was
    assert run.error is not None and run.error["ename"] == "LaunchInterrupted"
    assert psutil.Process(kernel.pid).children(recursive=True) == []
    again = kernel.run("r = notebook_launch(train, args=(1,), num_processes=2); print(len(r), r[1]['rank'])")
    assert again.error is None, again.text
    assert "2 1" in again.stdout


def test_a_failing_rank_raises_in_the_cell_with_its_traceback(kernel):
    kernel.run(DEFINE)
    kernel.run(FAILING)  # broken(): rank 1 raises, rank 0 waits in a barrier
    run = kernel.run("notebook_launch(broken, num_processes=2)", timeout=60)
    assert run.error["ename"] == "WorkerError"
    assert "rank 1 raised RuntimeError: bad batch on rank one" in run.error["evalue"]
    assert 'raise RuntimeError("bad batch on rank one")' in run.error["evalue"]
    assert psutil.Process(kernel.pid).children(recursive=True) == []


def test_twenty_launches_keep_the_kernel_clean(kernel):
    kernel.run(DEFINE + "\nimport os, signal\ndef quick():\n    return Accelerator().process_index\n")
    # Open file descriptors, less IPython's own: its history thread opens and closes
    # history.sqlite(-journal) under the profile directory whenever it saves (seen in CI as 61 -> 62).
    kernel.run(
        "def _open_fds():\n"
        "    import gc\n"
        "    gc.collect()  # files of unreachable objects close now, not between the two snapshots\n"
        "    mine = get_ipython().profile_dir.location\n"
        "    fds = {}\n"
        "    for fd in os.listdir('/proc/self/fd'):\n"
        "        try:\n"
        "            fds[fd] = os.readlink(f'/proc/self/fd/{fd}')\n"
        "        except OSError:\n"
        "            continue\n"
        "    return sorted(t for t in fds.values() if not t.startswith(mine))\n"
    )
    snapshot = (
        "(sorted(os.environ.items()), [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)], "
        "_open_fds())"
    )
    kernel.run("notebook_launch(quick, num_processes=2, quiet=True)")  # first launch warms imports
    before = kernel.value(snapshot)
    run = kernel.run(
        "for _ in range(20):\n    assert list(notebook_launch(quick, num_processes=2, quiet=True)) == [0, 1]"
    )
    assert run.error is None, run.report
    after = kernel.value(snapshot)
    assert after[0] == before[0], "os.environ changed"
    assert after[1] == before[1], "signal handlers changed"
    leaked = sorted(set(after[2]) - set(before[2])) or after[2][len(before[2]) :]
    assert len(after[2]) == len(before[2]), (
        f"file descriptors leaked: {len(before[2])} -> {len(after[2])}: {leaked}"
    )
    assert psutil.Process(kernel.pid).children(recursive=True) == []
