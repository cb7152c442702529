"""How long things take to end, where a user waits for them (or their ranks run on meanwhile).

1. `notebook-launcher launch` of a 2-rank script that prints one line: the whole command, and its
   tail, from the moment the last rank's script ended to the command's exit. Baselines in the
   same run: plain `torchrun` of the same script. Contenders alternate; medians.
2. The warm pool: `release_warm_pool()` (a kernel's shutdown or restart runs it), and how long its
   server and waiting workers live on once the process that started them is killed (a killed
   kernel). Baseline in the same run: a Python with the server's modules, from the close of its
   stdin to its exit (the end the server would have if it exited the normal way).

    python benchmarks/exit_latency.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
SCRIPT = """import os, time
print("rank", os.environ["RANK"], flush=True)
with open(f"ended-{os.environ['RANK']}", "w") as ended:
    ended.write(repr(time.time()))
"""


def _one_command(argv: list[str], cwd: str) -> tuple[float, float]:
    """(whole, tail): the command's wall time, and its exit after the last rank's script ended."""
    start = time.time()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)
    ended = time.time()
    assert done.returncode == 0, done.stdout + done.stderr
    ends = [Path(cwd, f"ended-{rank}") for rank in (0, 1)]
    last = max(float(end.read_text()) for end in ends)
    for end in ends:
        end.unlink()
    return ended - start, ended - last


def cli_contenders() -> dict[str, list[str]]:
    """Ours and plain torchrun. Not `accelerate launch`: given `--cpu --num_processes 2` it runs the
    script once, in one process (its multi-CPU launch needs MPI settings)."""
    return {
        "notebook-launcher launch": [str(BIN / "notebook-launcher"), "launch", "--num_processes", "2", "--cpu",
                                     "--quiet", "script.py"],
        "torchrun": [str(BIN / "torchrun"), "--nproc_per_node", "2", "script.py"],
    }  # fmt: skip


def cli_launches(repeats: int) -> None:
    contenders = cli_contenders()
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory() as cwd:
        Path(cwd, "script.py").write_text(SCRIPT)
        for _ in range(repeats):
            for name, argv in contenders.items():
                seen[name].append(_one_command(argv, cwd))
    base_whole = statistics.median(w for w, _ in seen["torchrun"])
    base_tail = statistics.median(t for _, t in seen["torchrun"])
    print(f"1. A 2-rank script from the command line, medians of {repeats}")
    print(f"   {'':26} {'whole':>8} {'ratio':>6}   {'tail':>8} {'ratio':>6}")
    for name, figures in seen.items():
        whole = statistics.median(w for w, _ in figures)
        tail = statistics.median(t for _, t in figures)
        print(
            f"   {name:26} {whole:7.2f}s {whole / base_whole:5.2f}x   {tail:7.2f}s {tail / base_tail:5.2f}x"
        )


POOL_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import psutil
    from notebook_launcher import notebook_launch
    from notebook_launcher.launch.warm.pool import release_warm_pool, warm_pool

    def one():
        return 1

    if __name__ == "__main__":
        notebook_launch(one, num_processes=2, start_method="forkserver", quiet=True)
        warm_pool().settle()
        if sys.argv[1] == "release":
            start = time.perf_counter()
            release_warm_pool()
            print("RELEASED", time.perf_counter() - start, flush=True)
        else:
            print("POOL", *[p.pid for p in psutil.Process().children(recursive=True)], flush=True)
            time.sleep(600)
    """
)


def _released(script: Path) -> float:
    done = subprocess.run(
        [sys.executable, str(script), "release"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return float(done.stdout.split("RELEASED")[1].split()[0])


def _gone_after_kill(script: Path) -> float:
    proc = subprocess.Popen([sys.executable, str(script), "kill"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()[1:]]
    processes = [psutil.Process(pid) for pid in pids]
    killed = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    while any(_live(p) for p in processes):
        assert time.monotonic() - killed < 120, "the pool outlived its process by 2 minutes"
        time.sleep(0.005)
    return time.monotonic() - killed


def _live(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _normal_end_of_a_python_with_the_servers_modules() -> float:
    code = "import sys, notebook_launcher.launch.warm.preload; print('loaded', flush=True); sys.stdin.read()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == "loaded\n"
    start = time.monotonic()
    proc.stdin.close()
    proc.wait()
    proc.stdout.close()
    return time.monotonic() - start


def warm_pool_ends(repeats: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder, "pool.py")
        script.write_text(POOL_SCRIPT)
        released, gone, baseline = [], [], []
        for _ in range(repeats):
            released.append(_released(script))
            gone.append(_gone_after_kill(script))
            baseline.append(_normal_end_of_a_python_with_the_servers_modules())
    base = statistics.median(baseline)
    print(f"2. The warm pool's end, medians of {repeats}")
    print(f"   a Python with the server's modules, ending normally (baseline): {base:.2f}s")
    for name, figures in (("release_warm_pool()", released), ("gone after its process's SIGKILL", gone)):
        median = statistics.median(figures)
        print(
            f"   {name:34} {median:7.3f}s {median / base:5.2f}x   (range {min(figures):.3f}-{max(figures):.3f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    cli_launches(args.repeats)
    warm_pool_ends(args.repeats)


if __name__ == "__main__":
    main()
