"""Model parallelism through notebook_launch (issue 27): real CPU processes (gloo) on a mesh end with
the weights of one-process training on the same global batches, fp32, to 1e-5 (measured: < 1e-7).

One launch per world size runs several meshes one after another in the same processes (suite time).
"""

from pathlib import Path

import pytest
import torch
from parallel_trainers import compositions, make_model, reference, save_and_resume

from notebook_launcher import notebook_launch

TIMEOUT = 240
ATOL = 1e-5


def max_diff(got: dict, want: dict) -> float:
    assert got.keys() == want.keys()
    return max((got[k] - want[k]).abs().max().item() for k in want)


def _with_llama(cases, folder):
    out = compositions(cases)
    try:
        import llama_trainers
    except ImportError:
        return out, None
    return out, [llama_trainers.train_tp(route, folder, 4, 3) for route in ("own_plan", "auto")]


@pytest.mark.slow
def test_tensor_parallel_alone_on_two_processes(tmp_path):
    """TP=2 by a plan, by parallelize_fn (with clipping), with "replicate" layers, in bf16, and a
    transformers Llama split by its own plan and loaded split with tp_plan="auto": all equal one
    process (bf16: close)."""
    cases = [
        (({"tp_size": 2}, 4, 3), {}),
        (({"tp_size": 2}, 4, 3), {"route": "fn", "clip": 0.05}),
        (({"tp_size": 2}, 4, 3), {"route": "replicate", "clip": 0.05}),
        (({"tp_size": 2}, 4, 2), {"mixed_precision": "bf16"}),
    ]
    folder = str(tmp_path)
    transformers = _llama_saved(folder)
    result = notebook_launch(_with_llama, args=(cases, folder), num_processes=2, timeout=TIMEOUT)
    meshes, llamas = result[0]
    for (args, kwargs), out in zip(cases, meshes, strict=True):
        assert out["mesh_dims"] == ("tp",)
        atol = 5e-2 if kwargs.get("mixed_precision") == "bf16" else ATOL  # bf16 compute: close, not equal
        assert max_diff(out["weights"], reference(4, args[2], clip=kwargs.get("clip"))) < atol, kwargs
    assert [r[0][0]["ranks"] for r in result] == [(0, 0, 0), (0, 0, 1)]
    assert result[0][0][0]["seen"] == result[1][0][0]["seen"]  # tp partners read the same batches
    assert meshes[0]["gathered"] == 4  # each sample once, not once per tp rank
    if transformers:
        import llama_trainers

        for route, out in zip(("own_plan", "auto"), llamas, strict=True):
            want = llama_trainers.reference(folder if route == "auto" else None, 4, 3)
            assert out["losses"] == pytest.approx(want["losses"], abs=1e-6), route
            assert max_diff(out["weights"], want["weights"]) < ATOL, route


def _llama_saved(folder) -> bool:
    try:
        import llama_trainers
    except ImportError:
        return False
    llama_trainers.save_llama(folder)
    return True


@pytest.mark.slow
def test_fsdp2_by_tp_hsdp_and_resume_on_four_processes(tmp_path):
    """FSDP2 x TP (with accumulation, no_sync and clipping), HSDP (2 replicas x 2 shards), FSDP2 x TP
    through an FSDP plugin in bf16, and save_state (sharded) / load_state, save_model and
    merge-weights on FSDP2 x TP."""
    cases = [
        (({"dp_shard_size": 2, "tp_size": 2}, 2, 3), {"accumulate": 2, "clip": 0.05}),
        (({"dp_replicate_size": 2, "dp_shard_size": 2}, 2, 3), {}),
        (({"dp_shard_size": 2, "tp_size": 2}, 2, 2), {"fsdp_plugin": True, "mixed_precision": "bf16"}),
    ]
    folder = str(tmp_path)
    result = notebook_launch(
        _four, args=(cases, {"dp_shard_size": 2, "tp_size": 2}, folder), num_processes=4, timeout=TIMEOUT
    )
    meshes, resume = result[0]
    fsdp_tp, hsdp, bf16 = meshes
    assert fsdp_tp["mesh_dims"] == ("dp_shard", "tp") and fsdp_tp["distributed_type"] == "FSDP"
    assert max_diff(fsdp_tp["weights"], reference(4, 3, accumulate=2, clip=0.05)) < ATOL
    assert hsdp["mesh_dims"] == ("dp_replicate", "dp_shard")
    assert max_diff(hsdp["weights"], reference(8, 3)) < ATOL
    assert max_diff(bf16["weights"], reference(4, 2)) < 5e-2  # bf16 compute: close, not equal
    # data: tp partners read the same batches, data-parallel ranks different ones
    seen = [r[0][0]["seen"] for r in result]
    assert seen[0] == seen[1] and seen[2] == seen[3] and seen[0] != seen[2]
    assert [r[0][1]["ranks"] for r in result] == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    assert fsdp_tp["gathered"] == 4 and hsdp["gathered"] == 8
    # checkpoints: an exact resume, and full safetensors weights that load into the plain model
    assert max_diff(resume["resumed"], resume["straight"]) == 0.0
    assert max_diff(resume["straight"], reference(4, 4)) < ATOL
    from safetensors.torch import load_file

    plain = make_model()
    plain.load_state_dict(load_file(f"{folder}/model/model.safetensors"))
    assert max_diff({k: v.detach() for k, v in plain.state_dict().items()}, reference(4, 4)) < ATOL
    # the sharded (torch.distributed.checkpoint) save_state folder merges into the full weights
    from notebook_launcher.cli.merge_weights import merge_weights

    merged = merge_weights(Path(folder) / "ckpt", Path(folder) / "merged")
    got = load_file(str(merged))
    assert max_diff(got, reference(4, 2)) < ATOL


def _four(cases, resume_sizes, folder):
    return compositions(cases), save_and_resume(resume_sizes, 2, folder, sharded=True)


def test_a_launch_with_sizes_not_matching_its_processes_starts_nothing():
    from notebook_launcher import ParallelismConfig
    from notebook_launcher.errors import ConfigError

    with pytest.raises(ConfigError, match="world size 2"):
        notebook_launch(torch.zeros, num_processes=2, parallelism_config=ParallelismConfig(tp_size=4))
