"""Tolerances that hold on any x86-64 CPU: a multiple of a noise floor measured in the same test.

Two correct trainings that sum in different orders (DDP vs FSDP or ZeRO, one process vs two, a
larger batch vs accumulation) differ by rounding, and training carries that difference forward,
growing it by an amount that depends on the CPU's kernels (vector width, summation order, threads):
ZeRO-3 vs DDP stayed below 1e-5 on one machine and reached 6.9e-5 on an AMD EPYC (5.3e-4 with
ATEN_CPU_CAPABILITY=default). A fixed figure therefore fails somewhere. Each comparison here instead
measures, in the same test, what rounding alone does to that training on this machine: the
reference run once more with every weight moved by one ulp before every step
(trainers.nudge_weights), as if each update had rounded the other way. Its distance from the
reference is the noise floor. A correct strategy's distance must stay within FLOOR_MULTIPLE times it
(plus a few ulps of the values compared); a broken one (a skipped all-reduce, a wrong shard, a wrong
scale) lands far higher from the first steps on.

Losses are compared step by step against the floor reached by that step, so a training that
amplifies rounding late (the notebooks' language model: a few ulps over the first steps, 1e-3 after
96) still has a tight bound where a bug shows first. Weights are compared as a whole: the largest
difference over all tensors against the largest floor over all tensors (a tensor whose true
gradient is zero, like the attention key bias, holds pure rounding noise that no per-tensor floor
would predict).
"""

from __future__ import annotations

import torch

FLOOR_MULTIPLE = 16
"""The nudge moves every weight by one ulp per step. Another order of summation changes a gradient by
a few ulps of that gradient, hence an update by a few ulps of the update, which moves a weight by at
most an ulp or two; it may also change the forward pass by a few ulps (ZeRO-3 computes the linear
layers with its own kernels). So a correct strategy injects at most a few times the nudge's noise
per step, and training carries both alike; 16 leaves room over that. Measured on three CPU kernel
sets (ATEN_CPU_CAPABILITY=default/avx2/avx512): at most 2x the floor (ZeRO-3 in notebook 04)."""

FLOOR_ULPS = 4
"""Plus 4 ulps of the largest value compared: without any amplification both distances are one or
two ulps of the values, and a single nudged run may by chance land on a smaller one."""


def ulp(value: float) -> float:
    """The float32 spacing at |value|."""
    t = torch.tensor(abs(float(value)), dtype=torch.float32)
    return (torch.nextafter(t, torch.tensor(float("inf"))) - t).item()


def weight_gap(got: dict, want: dict) -> float:
    assert got.keys() == want.keys()
    return max((got[k].float() - want[k].float()).abs().max().item() for k in want)


def weights_bound(want: dict, nudged: dict) -> float:
    """How far weights may be from `want`: FLOOR_MULTIPLE x the floor `nudged` shows + a few ulps."""
    scale = max(v.float().abs().max().item() for v in want.values())
    return FLOOR_MULTIPLE * weight_gap(nudged, want) + FLOOR_ULPS * ulp(scale)


def assert_weights_within_floor(got: dict, want: dict, nudged: dict, what: str = "") -> None:
    """The largest weight difference of `got` from `want` is within the floor `nudged` measures."""
    gap, bound = weight_gap(got, want), weights_bound(want, nudged)
    assert gap <= bound, (
        f"{what}: largest weight difference {gap:.2e} exceeds {FLOOR_MULTIPLE} x the noise floor "
        f"{weight_gap(nudged, want):.2e} + {FLOOR_ULPS} ulps = {bound:.2e}"
    )


def assert_losses_within_floor(got: list, want: list, nudged: list, what: str = "") -> None:
    """Per step: |got - want| is within FLOOR_MULTIPLE x the largest floor so far + a few ulps."""
    assert len(got) == len(want) == len(nudged), (len(got), len(want), len(nudged))
    floor = 0.0
    for step, (g, w, n) in enumerate(zip(got, want, nudged, strict=True)):
        floor = max(floor, abs(n - w))
        bound = FLOOR_MULTIPLE * floor + FLOOR_ULPS * ulp(w)
        assert abs(g - w) <= bound, (
            f"{what}: step {step} loss {g!r} vs reference {w!r} differ by {abs(g - w):.2e}, more than "
            f"{FLOOR_MULTIPLE} x the noise floor so far {floor:.2e} + {FLOOR_ULPS} ulps = {bound:.2e}"
        )
