"""What a checkpoint costs the training: save_state() vs save_state(async_save=True), same run.

A ~101M-parameter MLP (6 x Linear(4096, 4096)) + AdamW under DDP on 2 CPU processes (gloo), in
one launch, these loops one after another (the model keeps training throughout):

- no saving: --steps steps, the steps/s baseline;
- synchronous: the same steps, save_state() every --every steps;
- asynchronous: the same steps, save_state(async_save=True) every --every steps;
--rounds times, in rotating order (a change of machine load hits each alike; best steps/s kept).

Printed for rank 0: time training is blocked per save (from the second save on: the first async
save allocates its staging buffers), the total write time of an async save (call -> published),
the peak host memory a save adds above the loop's start (VmHWM after resetting it, Linux), the
staging buffers held, and steps/s of each loop; ratios async/sync and saving/not saving. In a
second launch, HuggingFace Accelerate's own synchronous save_state of the same model and optimizer
(when accelerate is installed), the baseline the README names.

    python benchmarks/checkpoint_async.py [--steps 40] [--every 20] [--rounds 2] [--layers 6] [--width 4096]

--staging: only what a cached save layout could take off the blocked time, in this process: the
second save's staging (writers.stage: the walk of the state dicts, each tensor's buffer looked up, the
copies) beside the bare copies of the same tensors into the same buffers, alternated, medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux)
    except OSError:
        pass


def _model(layers: int, width: int):
    from torch import nn

    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks)


def ours(folder: str, steps: int, every: int, layers: int, width: int, rounds: int) -> dict:
    """The three loops inside one launched function; rank 0's figures."""
    import torch

    from notebook_launcher import Accelerator
    from notebook_launcher.runtime.checkpointing import async_save
    from notebook_launcher.utils import ProjectConfiguration, set_seed

    set_seed(0)
    accelerator = Accelerator(
        project_config=ProjectConfiguration(
            project_dir=folder, automatic_checkpoint_naming=True, total_limit=1
        )
    )
    model = _model(layers, width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(8, width)

    def step() -> None:
        accelerator.backward(model(x).square().mean())
        optimizer.step()
        optimizer.zero_grad()

    for _ in range(2):  # AdamW's state exists from here on
        step()
    out: dict = {"params": sum(p.numel() for p in model.parameters())}
    for mode in ("none", "sync", "async"):
        out[mode] = {"steps_per_s": [], "blocked": [], "final_wait": [], "peak_added_mib": []}
    order = ["none", "sync", "async"]
    for _ in range(rounds):  # the loops alternate, so a change of machine load hits each alike
        for mode in order:
            accelerator.wait_for_everyone()
            _reset_peak()
            start_rss = _rss_kib("VmRSS")
            began = time.perf_counter()
            for i in range(1, steps + 1):
                step()
                if mode != "none" and i % every == 0:
                    t = time.perf_counter()
                    accelerator.save_state(async_save=mode == "async")
                    out[mode]["blocked"].append(time.perf_counter() - t)
            loop = time.perf_counter() - began
            t = time.perf_counter()
            async_save.finish_pending()  # the last async save, written before the next loop
            out[mode]["final_wait"].append(time.perf_counter() - t)
            accelerator.wait_for_everyone()
            out[mode]["steps_per_s"].append(steps / loop)
            out[mode]["peak_added_mib"].append((_rss_kib("VmHWM") - start_rss) / 1024)
        order = order[1:] + order[:1]
    history = async_save.saver().history
    out["async"]["total"] = [r.total_s for r in history]
    out["async"]["staged_mib"] = history[-1].staged_bytes / 2**20
    out["async"]["buffers_mib"] = async_save.saver().buffers.held_bytes() / 2**20
    return out


def accelerate_sync(folder: str, saves: int, layers: int, width: int) -> dict | None:
    """HuggingFace Accelerate's save_state of the same model + AdamW, timed (rank 0)."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    set_seed(0)
    accelerator = Accelerator(cpu=True)
    model = _model(layers, width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(8, width)
    for _ in range(2):
        accelerator.backward(model(x).square().mean())
        optimizer.step()
        optimizer.zero_grad()
    blocked = []
    for i in range(saves):
        accelerator.wait_for_everyone()
        t = time.perf_counter()
        accelerator.save_state(os.path.join(folder, f"hf_{i}"))
        blocked.append(time.perf_counter() - t)
    return {"blocked": blocked}


def staging_walk(layers: int, width: int, repeats: int = 7) -> None:
    """The second save's staging vs the bare copies it makes (the floor a cached layout would reach)."""
    import torch

    from notebook_launcher.runtime.checkpointing.writers import StagingBuffers, stage

    model = _model(layers, width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    buffers = StagingBuffers()
    stage(state, buffers, ("state",))  # the first save makes the buffers
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []

    def collect(obj: object, key: tuple[str, ...]) -> None:
        if isinstance(obj, torch.Tensor):
            pairs.append((buffers.buffer_for(key, obj), obj))
        elif isinstance(obj, dict):
            for name, value in obj.items():
                collect(value, (*key, str(name)))

    collect(state, ("state",))
    staged, bare = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        stage(state, buffers, ("state",))
        staged.append(time.perf_counter() - began)
        began = time.perf_counter()
        for buffer, tensor in pairs:
            buffer.copy_(tensor)
        bare.append(time.perf_counter() - began)
    ours, floor = statistics.median(staged), statistics.median(bare)
    mib = sum(b.numel() * b.element_size() for b, _ in pairs) / 2**20
    print(
        f"staging, 2nd save on: {len(pairs)} tensors, {mib:.0f} MiB, {layers}x Linear({width}, {width}) + AdamW"
    )
    print(
        f"  stage() {ours * 1e3:.1f} ms   bare copies {floor * 1e3:.1f} ms   ratio {ours / floor:.2f}x   "
        f"(all: stage {_fmt(staged)}, bare {_fmt(bare)} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2, help="each loop this many times, alternating")
    parser.add_argument("--staging", action="store_true", help="only the staging walk vs its bare copies")
    args = parser.parse_args()
    if args.staging:
        staging_walk(args.layers, args.width)
        return
    from notebook_launcher import notebook_launch

    folder = tempfile.mkdtemp(prefix="checkpoint_async_")
    try:
        result = notebook_launch(
            ours,
            args=(folder, args.steps, args.every, args.layers, args.width, args.rounds),
            num_processes=2,
            quiet=True,
        )[0]
        try:
            import accelerate  # noqa: F401

            hf = notebook_launch(
                accelerate_sync,
                args=(folder, args.rounds * (args.steps // args.every), args.layers, args.width),
                num_processes=2,
                quiet=True,
            )[0]
        except ImportError:
            hf = None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report(result, hf, args)


def report(r: dict, hf: dict | None, args: argparse.Namespace) -> None:
    def later(values: list[float]) -> float:  # from the second save on
        return statistics.median(values[1:] if len(values) > 1 else values)

    sync_blocked, async_blocked = later(r["sync"]["blocked"]), later(r["async"]["blocked"])
    print(f"model: {r['params'] / 1e6:.1f}M parameters + AdamW, DDP, 2 CPU processes (gloo), rank 0")
    print(
        f"saves every {args.every} of {args.steps} steps; figures per save are medians from the 2nd save on"
    )
    print(
        f"  blocked per save   sync {sync_blocked:.3f} s   async {async_blocked:.3f} s   "
        f"ratio {async_blocked / sync_blocked:.2f}x   (all: sync {_fmt(r['sync']['blocked'])}, async {_fmt(r['async']['blocked'])})"
    )
    total = [t for t in r["async"]["total"] if t is not None]
    print(
        f"  async write, call -> published: {_fmt(total)} s (median {later(total):.3f} s = "
        f"{later(total) / sync_blocked:.2f}x the sync save)"
    )
    if hf is not None:
        hf_blocked = later(hf["blocked"])
        print(
            f"  Accelerate's save_state (sync): {_fmt(hf['blocked'])} s; ours sync {sync_blocked / hf_blocked:.2f}x, "
            f"ours async {async_blocked / hf_blocked:.2f}x"
        )
    print(
        f"  peak host memory added over a loop (the most of any round): none {max(r['none']['peak_added_mib']):.0f} "
        f"MiB, sync {max(r['sync']['peak_added_mib']):.0f} MiB, async {max(r['async']['peak_added_mib']):.0f} MiB "
        f"(staging buffers held {r['async']['buffers_mib']:.0f} MiB, staged per save {r['async']['staged_mib']:.0f} MiB)"
    )
    best = {mode: max(r[mode]["steps_per_s"]) for mode in ("none", "sync", "async")}
    print(
        f"  steps/s, best of {args.rounds} alternating rounds: no saving {best['none']:.3f}, sync {best['sync']:.3f} "
        f"({best['sync'] / best['none']:.2f}x), async {best['async']:.3f} ({best['async'] / best['none']:.2f}x; "
        f"the last save's remaining write after the loop: {_fmt(r['async']['final_wait'])} s); all rounds: "
        f"none {_fmt(r['none']['steps_per_s'])}, sync {_fmt(r['sync']['steps_per_s'])}, async "
        f"{_fmt(r['async']['steps_per_s'])}"
    )


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


if __name__ == "__main__":
    main()
