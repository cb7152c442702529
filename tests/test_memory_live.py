"""Live memory: every worker samples its memory through the channel; `result.memory` keeps the
samples, a warning comes before the limit, and the RunView shows both. Plus the readers of
notebook_launcher/system/host_memory.py on fake /proc and /sys trees."""

from pathlib import Path

import pytest

from notebook_launcher import notebook_launch
from notebook_launcher.launch.events import MemorySampled, MemoryWarning, RunStarted
from notebook_launcher.launch.supervise.memory_watch import MemoryWatch
from notebook_launcher.launch.supervise.stacks import readable
from notebook_launcher.launch.worker import memory_sampler
from notebook_launcher.system.host_memory import (
    LIMIT_ENV,
    _cgroup_v1,
    _cgroup_v2,
    format_bytes,
    parse_bytes,
    process_memory,
)
from notebook_launcher.widgets.view.run_state import RunState

ALLOCATED = 160 * 2**20


def hold_memory(seconds: float = 0.6) -> int:
    """Fill 160 MiB, keep it a moment (so a sample sees it), and let it go."""
    import time

    import torch

    block = torch.ones(ALLOCATED // 4)
    time.sleep(seconds)
    return int(block.sum().item())


@pytest.fixture
def fast_samples(monkeypatch):
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_MEMORY_INTERVAL", "0.1")


def test_each_rank_reports_its_memory_and_its_peak(fast_samples):
    result = notebook_launch(hold_memory, num_processes=2, timeout=120, quiet=True)
    for rank in (0, 1):
        samples = result.memory[rank]
        assert len(samples) >= 3, samples
        first, last = samples[0], samples[-1]
        assert first["rss"] > 0 and first["limit"] > 0 and first["limit_source"]
        # the peak covers the 160 MiB block, although it was freed before the last sample
        assert result.memory.peak_rss(rank) - first["rss"] >= 0.95 * ALLOCATED
        assert last["rss"] < result.memory.peak_rss(rank)
        assert [s["time"] for s in samples] == sorted(s["time"] for s in samples)
        assert "gpu_allocated" not in first  # no CUDA in this worker: the GPU is never asked
    assert result.memory.warnings == []


def test_a_rank_near_the_limit_is_flagged_once_in_the_cell(fast_samples, monkeypatch, capfd):
    monkeypatch.setenv(LIMIT_ENV, "64M")  # a budget this machine is already past
    result = notebook_launch(hold_memory, num_processes=2, timeout=120)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "memory is running out" in line]
    assert len(lines) == 1, err  # once per launch, not once per sample
    assert LIMIT_ENV in lines[0] and "rank " in lines[0] and "sharded_init" in lines[0]
    assert result.memory.warnings == [lines[0].removeprefix("notebook_launcher: ")]


def test_sampling_off_leaves_no_samples(monkeypatch):
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_MEMORY_INTERVAL", "0")
    result = notebook_launch(hold_memory, kwargs={"seconds": 0.0}, num_processes=1, timeout=60, quiet=True)
    assert dict(result.memory) == {}


def test_the_run_view_state_shows_memory_per_rank_and_the_warning():
    state = RunState()
    state.apply(RunStarted(2, (0, 1), "fork", None))
    watch = MemoryWatch()
    base = {"used": 950, "limit": 1000, "limit_source": "machine"}
    events = watch.ingest(0, dict(base, used=500, time=1.0, rss=300 * 2**20, peak_rss=400 * 2**20))
    assert not [e for e in events if isinstance(e, MemoryWarning)]  # half the machine in use: fine
    events += watch.ingest(1, dict(base, time=1.1, rss=500 * 2**20, peak_rss=500 * 2**20))
    events += watch.ingest(1, dict(base, time=1.2, rss=200 * 2**20, peak_rss=500 * 2**20))
    warnings = [e for e in events if isinstance(e, MemoryWarning)]
    assert len(warnings) == 1 and warnings[0].rank == 1  # the rank holding the most when it came near
    for event in events:
        state.apply(event)
    text = state.memory_text()
    assert "rank 0 300 MiB (peak 400 MiB)" in text and "rank 1 200 MiB (peak 500 MiB)" in text
    assert "memory is running out (rank 1)" in state.status_text()
    assert watch.record.peak_rss(1) == 500 * 2**20 and len(watch.record[1]) == 2


def test_the_run_view_draws_the_memory_line():
    from notebook_launcher import RunView

    view = RunView()
    view(RunStarted(1, (0,), "fork", None))
    view(MemorySampled(0, {"time": 1.0, "rss": 2**30, "peak_rss": 2**30, "used": 1, "limit": 8 * 2**30,
                           "limit_source": "machine", "gpu_allocated": 3 * 2**30, "gpu_peak": 4 * 2**30}))  # fmt: skip
    view(MemoryWarning(0, "memory is running out: test"))
    view.refresh()
    assert view.memory_line.layout.display == ""
    assert (
        "rank 0 1.0 GiB" in view.memory_line.value and "GPU 3.0 GiB (peak 4.0 GiB)" in view.memory_line.value
    )
    assert "memory is running out: test" in view.memory_line.value


def test_stack_dumps_leave_out_the_sampler_thread():
    """A rank's stack dump (timeout, stop, Ctrl-C) shows the user's threads, not the sampler's loop."""
    sampler = memory_sampler.__file__
    dump = (
        "Thread 0x00007f0000000001 (most recent call first):\n"
        f'  File "{sampler}", line 95 in _run\n'
        '  File "/usr/lib/python3.11/threading.py", line 982 in run\n'
        "\n"
        "Thread 0x00007f0000000002 (most recent call first):\n"
        '  File "/home/me/loader.py", line 7 in read_shard\n'
        "\n"
        "Current thread 0x00007f0000000003 (most recent call first):\n"
        '  File "/home/me/train.py", line 12 in train'
    )
    shown = readable(dump)
    assert sampler not in shown and "0x00007f0000000001" not in shown
    assert "read_shard" in shown and "line 12 in train" in shown


def test_gpu_samples_warn_near_the_devices_total():
    watch = MemoryWatch()
    sample = {"used": 1, "limit": 100, "limit_source": "machine", "rss": 1, "gpu_used": 96, "gpu_total": 100}
    events = watch.ingest(3, sample)
    assert [e.text.split(":")[0] for e in events if isinstance(e, MemoryWarning)] == [
        "GPU memory is running out on rank 3"
    ]


def _mapped_bytes() -> int:
    """Bytes glibc holds in chunks of their own mmap (mallinfo2's hblkhd): what a fixed mmap
    threshold puts large blocks in, and the heap does not."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"
        )]  # fmt: skip

    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = MallInfo2
    return int(mallinfo2().hblkhd)


def free_blocks_in_the_heap(accelerator_kwargs: dict | None = None) -> dict[str, int]:
    """Allocate 50 tensors of 4 MiB, each followed by a small one that stays, then free the big
    ones. With glibc's default (after the first free of a 16 MiB block its threshold is above
    4 MiB) they come from the heap; with a fixed threshold each gets its own mmap. Where they came
    from is read from glibc itself (mallinfo2), not from RSS at `del`: whether the heap gives pages
    back at `del` depends on where the small ones land, which a parent's inherited free holes
    decide. Then a phase boundary (release_memory) must give the free pages back."""
    import torch

    from notebook_launcher import Accelerator
    from notebook_launcher.system.host_memory import process_memory
    from notebook_launcher.utils import release_memory

    if accelerator_kwargs is not None:
        Accelerator(**accelerator_kwargs)
    first = torch.ones(4 * 2**20)
    del first
    mapped_before = _mapped_bytes()
    blocks, pins = [], []
    for _ in range(50):
        blocks.append(torch.ones(2**20))
        pins.append(torch.ones(16 * 2**10))
    mapped = _mapped_bytes() - mapped_before
    full = process_memory().rss
    del blocks
    at_del = full - process_memory().rss
    release_memory()
    return {"mapped": mapped, "at_del": at_del, "at_release": full - process_memory().rss}


def test_a_worker_keeps_freed_blocks_as_a_plain_process_and_returns_them_at_a_phase_boundary():
    """Issue 25: no process-wide mmap threshold in a worker (every large tensor would cost page
    faults on every step); the heap's free pages go back at release_memory() instead."""
    returned = notebook_launch(free_blocks_in_the_heap, num_processes=1, timeout=60, quiet=True)[0]
    assert returned["mapped"] < 4 * 2**20, (
        f"{returned['mapped'] / 2**20:.0f} MiB of the 200 MiB of 4 MiB blocks were mmapped one by one: "
        "a threshold is set"
    )
    assert returned["at_release"] >= 150 * 2**20, (
        f"only {returned['at_release'] / 2**20:.0f} MiB of 200 MiB went back at release_memory()"
    )


KERNEL_THAT_FIXED_THE_THRESHOLD = """
import json, sys
sys.path.insert(0, {tests!r})
from notebook_launcher import notebook_launch
from notebook_launcher.system.host_memory import return_freed_memory_to_os
from test_memory_live import free_blocks_in_the_heap
assert return_freed_memory_to_os()  # what an FSDP Accelerator built in the kernel itself does
print(json.dumps(notebook_launch(free_blocks_in_the_heap, num_processes=1, timeout=60, quiet=True)[0]))
"""


def test_a_worker_does_not_inherit_a_threshold_its_kernel_fixed(tmp_path):
    """A kernel that fixed glibc's threshold (an FSDP Accelerator made in the kernel) forks workers
    that would inherit it; they undo it (failed once in the full suite, where another test had
    fixed it in pytest's own process)."""
    import json
    import subprocess
    import sys

    script = KERNEL_THAT_FIXED_THE_THRESHOLD.format(tests=str(Path(__file__).resolve().parent))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    returned = json.loads(done.stdout.strip().splitlines()[-1])
    assert returned["mapped"] < 4 * 2**20, (
        f"{returned['mapped'] / 2**20:.0f} MiB of 4 MiB blocks were mmapped one by one: the threshold was inherited"
    )
    assert returned["at_release"] >= 150 * 2**20, returned


@pytest.mark.slow
def test_a_sharded_strategy_returns_freed_blocks_at_once():
    """FSDP is chosen for memory: from the Accelerator's creation, blocks of >= 1 MiB are mapped and
    unmapped, so freed ones leave at `del` (docs/sharding.md: its peak depends on it)."""
    returned = notebook_launch(
        free_blocks_in_the_heap, args=({},), num_processes=2, timeout=120, quiet=True,
        distributed_type="FSDP",
    )  # fmt: skip
    for rank in returned:
        assert rank["at_del"] >= 150 * 2**20, (
            f"only {rank['at_del'] / 2**20:.0f} MiB of 200 MiB went back at del"
        )


# ------------------------------------------------------------------ readers
def test_process_memory_sees_an_allocation():
    import torch

    before = process_memory()
    block = torch.ones(64 * 2**20 // 4)
    after = process_memory()
    assert after.rss - before.rss >= 60 * 2**20 and after.peak_rss >= after.rss
    del block


def test_cgroup_v2_takes_the_tightest_limit_up_the_tree(tmp_path: Path):
    proc = tmp_path / "cgroup"
    proc.write_text("0::/outer/inner\n")
    root = tmp_path / "sys"
    (root / "outer" / "inner").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory\n")
    (root / "outer" / "memory.max").write_text(str(8 * 2**30))
    (root / "outer" / "memory.current").write_text(str(7 * 2**30))
    (root / "outer" / "memory.stat").write_text(f"anon 1\ninactive_file {2**30}\n")
    (root / "outer" / "inner" / "memory.max").write_text("max\n")  # no limit of its own
    (root / "outer" / "inner" / "memory.current").write_text("5\n")
    found = _cgroup_v2(root, proc)
    assert found.limit == 8 * 2**30 and found.used == 6 * 2**30 and found.source == "cgroup v2"


def test_cgroup_v1_ignores_the_no_limit_value(tmp_path: Path):
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job\n0::/\n")
    root = tmp_path / "memory"
    (root / "job").mkdir(parents=True)
    (root / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (root / "memory.usage_in_bytes").write_text("1\n")
    assert _cgroup_v1(root, proc) is None
    (root / "job" / "memory.limit_in_bytes").write_text(str(2**30))
    (root / "job" / "memory.usage_in_bytes").write_text(str(2**29))
    found = _cgroup_v1(root, proc)
    assert found.limit == 2**30 and found.used == 2**29 and found.source == "cgroup v1"


def test_amounts_parse_and_print():
    assert (
        parse_bytes("8G") == 8 * 2**30
        and parse_bytes("512MiB") == 512 * 2**20
        and parse_bytes("1000") == 1000
    )
    assert format_bytes(1.5 * 2**30) == "1.5 GiB" and format_bytes(300 * 2**20) == "300 MiB"
    with pytest.raises(ValueError, match="8 gigs"):
        parse_bytes("8 gigs", LIMIT_ENV)
