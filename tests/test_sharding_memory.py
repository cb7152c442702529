"""Memory per rank, measured on 2 real CPU processes with benchmarks/sharding_memory.py's probe
(a 28M-parameter transformer, fp32 AdamW, three steps): FSDP FULL_SHARD and ZeRO-3, both built
with `accelerator.sharded_init()`, peak below DDP's; `estimate_memory` within 10 % of the bytes
each rank really holds for parameters, gradients and optimizer state.

"Peak" is the growth of VmHWM above the worker's RSS when the function starts (forked workers
start with the launcher's pages resident; see the benchmark's docstring). The asserted ratio is
loose on purpose — below DDP's — because peaks move with the allocator and the machine's load;
the goal figure (<= 0.6x on the 50M model) is measured by the benchmark, not asserted. Bytes
held are exact counts, so 10 % is a real bound.
"""

import sys
from pathlib import Path

import pytest
from deepspeed_import import import_deepspeed_or_skip

from notebook_launcher import notebook_launch
from notebook_launcher.estimate.memory_estimate import estimate_memory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from sharding_memory import FSDP, ZERO3, build_model, measure  # noqa: E402

SIZE = dict(width=768, layers=4, steps=2, batch=4, seq=32)
ROWS = {"DDP": ({}, "DDP"), "FSDP": (FSDP, "FSDP FULL_SHARD"), "ZeRO-3": (ZERO3, "ZeRO-3")}
MODEL_BYTES = 4 * sum(p.numel() for p in build_model(SIZE["width"], SIZE["layers"]).parameters())

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def measured():
    import_deepspeed_or_skip()  # forked workers inherit it
    found = {}
    for name, (options, _) in ROWS.items():
        kwargs = dict(SIZE, sharded_init=name != "DDP")
        result = notebook_launch(measure, kwargs=kwargs, num_processes=2, timeout=600, quiet=True, **options)
        found[name] = [result[0], result[1]]
    return found


@pytest.mark.parametrize("name", ["FSDP", "ZeRO-3"])
def test_sharded_peak_is_below_ddps(measured, name):
    ddp = max(r["rss_growth"] for r in measured["DDP"])
    sharded = max(r["rss_growth"] for r in measured[name])
    assert sharded < ddp, f"{name} peaked at {sharded / 2**20:.0f} MiB, DDP at {ddp / 2**20:.0f} MiB"


@pytest.mark.parametrize("name", list(ROWS))
def test_the_estimate_is_within_ten_percent_of_what_ranks_hold(measured, name):
    estimate = estimate_memory(lambda: build_model(SIZE["width"], SIZE["layers"]), 2).find(ROWS[name][1])
    for field in ("params", "grads", "optimizer"):
        held = max(r[field] for r in measured[name])
        predicted = {
            "params": estimate.parameters,
            "grads": estimate.gradients,
            "optimizer": estimate.optimizer,
        }
        assert held == pytest.approx(predicted[field], rel=0.10), f"{name} {field}"


@pytest.fixture(scope="module")
def overhead(measured):
    """Rank 1's peak through prepare for the same run with a model of a few kB: the process group's
    and the allocator's own share, which differs between Python builds (86 MiB in all with pyenv's
    3.11.7, 122 MiB with Debian 12's 3.11.2), measured here rather than assumed."""
    tiny = dict(SIZE, width=16, layers=1, sharded_init=True)
    return notebook_launch(measure, kwargs=tiny, num_processes=2, timeout=600, quiet=True, **FSDP)[1][
        "prepare_peak"
    ]


def test_with_sharded_init_rank_1_never_holds_the_whole_model(measured, overhead):
    """Built on the meta device and filled shard by shard: what rank 1's peak through prepare adds
    over the same run with a tiny model stays under one copy of the model (its half of the weights
    is ~54 MiB). Built ordinarily, it holds the whole model first."""
    fsdp_rank1 = measured["FSDP"][1]["prepare_peak"] - overhead
    ddp_rank1 = measured["DDP"][1]["prepare_peak"] - overhead
    print(f"rank 1 through prepare, over a tiny model's {overhead / 2**20:.0f} MiB: sharded init ", end="")
    print(
        f"{fsdp_rank1 / 2**20:.0f} MiB, ordinary DDP {ddp_rank1 / 2**20:.0f} MiB, model {MODEL_BYTES / 2**20:.0f} MiB"
    )
    assert fsdp_rank1 < MODEL_BYTES, (
        f"{fsdp_rank1 / 2**20:.0f} MiB over a tiny model's {overhead / 2**20:.0f} MiB; "
        f"model {MODEL_BYTES / 2**20:.0f} MiB"
    )
    assert (
        measured["DDP"][1]["prepare_peak"] - overhead >= MODEL_BYTES
    )  # an ordinary build holds it all  # an ordinary build holds it all
