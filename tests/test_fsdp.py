"""FSDP2 through notebook_launch: 2 real CPU processes (gloo) train a small transformer to DDP's weights.

Tolerances (fp32): no fixed figure. FSDP sums in another arrangement than DDP (the clipping norm over
shards, the reduce-scatter), so the two differ by rounding, which training carries forward by an
amount that depends on the CPU. Each comparison allows a multiple of the noise floor measured here,
on this machine: DDP once more with every weight nudged by one ulp before each step (noise_floor.py says
why and how much). Weight comparisons use SGD+momentum: AdamW divides each gradient by its own size,
so a gradient that is pure rounding noise (the attention key bias's true gradient is exactly zero)
becomes a full-size step. What repeats the same arithmetic (NO_SHARD, which is DDP; a resume on the
same number of processes) is compared bit for bit.
"""

import pytest
import torch
from noise_floor import assert_losses_within_floor, assert_weights_within_floor
from sharding_trainers import (
    SGD,
    assert_same_weights,
    compute_dtypes,
    fsdp_mechanics,
    train_and_save_model,
    train_transformer,
    train_with_checkpoint,
    transformer_model,
)

from notebook_launcher import notebook_launch
from notebook_launcher.config import FSDPConfig
from notebook_launcher.errors import ConfigError


@pytest.fixture(scope="module", autouse=True)
def fsdp_imported():
    """The FSDP strategy imported once, before this file's first launch, so forked workers inherit it;
    here rather than at import, which every xdist worker's collection would pay (~0.7 s of CPU)."""
    import notebook_launcher.runtime.strategies.fsdp  # noqa: F401


LAYER = "TransformerEncoderLayer"
TIMEOUT = 120


def fsdp(**fsdp_config):
    return dict(
        distributed_type="FSDP", fsdp_config={"fsdp_transformer_layer_cls_to_wrap": LAYER, **fsdp_config}
    )


@pytest.fixture(scope="module")
def ddp_sgd():
    return notebook_launch(train_transformer, kwargs=SGD, num_processes=2, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def ddp_floor():
    """DDP with every weight nudged by one ulp before each step: the noise floor of ddp_sgd's training."""
    return notebook_launch(train_transformer, kwargs=dict(SGD, nudge=True), num_processes=2, timeout=TIMEOUT)[
        0
    ]


def assert_trains_like_ddp(result: dict, ddp: dict, floor: dict, what: str) -> None:
    assert_weights_within_floor(result["weights"], ddp["weights"], floor["weights"], what)
    assert_losses_within_floor(result["losses"], ddp["losses"], floor["losses"], what)


@pytest.mark.parametrize(
    "settings",
    [
        dict(),
        dict(fsdp_sharding_strategy="SHARD_GRAD_OP"),
        dict(fsdp_sharding_strategy="HYBRID_SHARD"),
        dict(fsdp_offload_params=True, fsdp_activation_checkpointing=True),
    ],
    ids=["full-shard", "shard-grad-op", "hybrid-shard", "cpu-offload+activation-checkpointing"],
)
def test_fsdp_trains_to_ddp_weights(settings, ddp_sgd, ddp_floor):
    result = notebook_launch(
        train_transformer, kwargs=SGD, num_processes=2, timeout=TIMEOUT, **fsdp(**settings)
    )
    assert_trains_like_ddp(result[0], ddp_sgd[0], ddp_floor, str(settings))
    assert result[1]["weights"] == {}  # gathered onto rank 0 only, as Accelerate's get_state_dict does


def test_hybrid_shard_replicates_across_machines_and_shards_within(ddp_sgd, ddp_floor):
    result = notebook_launch(
        train_transformer,
        kwargs=dict(SGD, pretend_machines=2),  # 2 "machines" of 1 process: a (2, 1) mesh
        num_processes=2,
        timeout=TIMEOUT,
        **fsdp(fsdp_sharding_strategy="HYBRID_SHARD"),
    )
    assert tuple(result[0]["mesh"]) == (2, 1)
    assert result[0]["local_numel"] == result[0]["total_numel"]  # nothing to shard within one process
    assert_trains_like_ddp(result[0], ddp_sgd[0], ddp_floor, "HYBRID_SHARD on a (2, 1) mesh")


@pytest.mark.parametrize(
    "order", [True, "prepared-first"], ids=["created-after-prepare", "prepared-before-model"]
)
def test_optimizer_created_after_prepare_or_prepared_first_works_too(order, ddp_sgd, ddp_floor):
    result = notebook_launch(
        train_transformer,
        kwargs=dict(SGD, optimizer_after_prepare=order),
        num_processes=2,
        timeout=TIMEOUT,
        **fsdp(),
    )
    assert_trains_like_ddp(result[0], ddp_sgd[0], ddp_floor, f"optimizer {order}")


def test_full_shard_holds_about_half_the_parameters_on_each_rank(ddp_sgd):
    result = notebook_launch(
        train_transformer, kwargs=dict(batch_size=8, epochs=1), num_processes=2, timeout=TIMEOUT, **fsdp()
    )
    total = result[0]["total_numel"]
    assert ddp_sgd[0]["local_numel"] == total  # DDP: the whole model on every rank
    local = [result[rank]["local_numel"] for rank in (0, 1)]
    assert sum(local) == total
    assert all(0.45 * total <= n <= 0.55 * total for n in local), (local, total)
    assert result[0]["losses"][-1] < result[0]["losses"][0]  # AdamW (the default here) on the shards trains


def test_accumulation_equals_the_larger_batch():
    kwargs = dict(optimizer="sgd", lr=0.05)
    accumulated = notebook_launch(
        train_transformer,
        kwargs=dict(batch_size=8, accumulation=2, **kwargs),
        num_processes=2,
        timeout=TIMEOUT,
        **fsdp(),
    )
    larger, floor = (
        notebook_launch(
            train_transformer,
            kwargs=dict(batch_size=16, nudge=nudge, **kwargs),
            num_processes=2,
            timeout=TIMEOUT,
            **fsdp(),
        )[0]
        for nudge in (False, True)
    )
    assert len(accumulated[0]["losses"]) == 2 * len(larger["losses"])
    # accumulation sums two half-batches where the larger batch sums once: rounding, within the floor
    assert_weights_within_floor(
        accumulated[0]["weights"], larger["weights"], floor["weights"], "accumulation"
    )


def test_size_based_wrap_matches_ddp(ddp_sgd, ddp_floor):
    sized = notebook_launch(
        train_transformer,
        kwargs=SGD,
        num_processes=2,
        timeout=TIMEOUT,
        distributed_type="FSDP",
        fsdp_config={"fsdp_auto_wrap_policy": "SIZE_BASED_WRAP", "fsdp_min_num_params": 1000},
    )
    assert_trains_like_ddp(sized[0], ddp_sgd[0], ddp_floor, "SIZE_BASED_WRAP")


def test_bf16_runs_through_fsdps_mixed_precision_policy():
    result = notebook_launch(
        compute_dtypes, num_processes=2, timeout=TIMEOUT, mixed_precision="bf16", **fsdp()
    )
    assert result[0]["in_forward"] == "torch.bfloat16"  # gathered for compute in bf16
    assert result[0]["stored"] == "torch.float32"  # the sharded master weights stay fp32
    fp32 = notebook_launch(compute_dtypes, num_processes=2, timeout=TIMEOUT, **fsdp())
    assert fp32[0]["in_forward"] == "torch.float32"
    # bf16 keeps 8 significant bits: unit roundoff u = 2**-8, a property of the format, not of the
    # CPU. Three steps leave no time for amplification, so each loss stays within a few u of fp32's
    # (measured 0.7 u on three CPU kernels); 8 u allows for the rounding of every layer's inputs.
    bf16_u = 2.0**-8
    for got, want in zip(result[0]["losses"], fp32[0]["losses"], strict=True):
        assert abs(got - want) <= 8 * bf16_u * abs(want), (result[0]["losses"], fp32[0]["losses"])
    assert result[0]["losses"] != fp32[0]["losses"]


@pytest.mark.parametrize(
    "settings, calls, gathered, offload",
    [
        (dict(), 1, "none", False),
        (dict(fsdp_sharding_strategy="SHARD_GRAD_OP"), 1, "all", False),
        (dict(fsdp_offload_params=True, fsdp_activation_checkpointing=True), 2, "none", True),
    ],
    ids=["full-shard", "shard-grad-op", "cpu-offload+activation-checkpointing"],
)
def test_each_fsdp_setting_changes_what_happens_in_a_step(settings, calls, gathered, offload):
    """Equal weights cannot tell these settings apart (they change memory and timing, not the
    maths), so this observes them: recomputation, weights kept between passes, the offload policy."""
    facts = notebook_launch(fsdp_mechanics, num_processes=2, timeout=TIMEOUT, **fsdp(**settings))[0]
    assert facts["linear1_calls_per_step"] == [calls, calls]
    expected = 0 if gathered == "none" else facts["block_params"]
    assert facts["block_params_gathered_after_forward"] == expected
    assert facts["cpu_offload"] is offload


def test_no_shard_falls_back_to_ddp_with_a_note(ddp_sgd):
    result = notebook_launch(
        train_transformer,
        kwargs=SGD,
        num_processes=2,
        timeout=TIMEOUT,
        **fsdp(fsdp_sharding_strategy="NO_SHARD"),
    )
    assert "NO_SHARD shards nothing; training with DDP instead" in result.logs[0]
    assert result[0]["local_numel"] == result[0]["total_numel"]
    assert_same_weights(result[0]["weights"], ddp_sgd[0]["weights"], atol=0)  # it is DDP: bit for bit


# ------------------------------------------------------------------------------ checkpoints
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("never-written") / "ckpt")
    return notebook_launch(
        train_with_checkpoint, args=(folder, None, False), num_processes=2, timeout=TIMEOUT, **fsdp()
    )[0]


@pytest.fixture(scope="module")
def uninterrupted_floor(tmp_path_factory):
    """The uninterrupted run nudged by one ulp per step: the noise floor of that training."""
    folder = str(tmp_path_factory.mktemp("never-written") / "ckpt")
    return notebook_launch(
        train_with_checkpoint,
        args=(folder, None, False),
        kwargs=dict(nudge=True),
        num_processes=2,
        timeout=TIMEOUT,
        **fsdp(),
    )[0]


@pytest.mark.parametrize("kind", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_checkpoint_saved_on_two_ranks_resumes_on_two_and_on_one(
    kind, tmp_path, uninterrupted, uninterrupted_floor
):
    folder = str(tmp_path / "ckpt")
    config = fsdp(fsdp_state_dict_type=kind)
    saved = notebook_launch(
        train_with_checkpoint, args=(folder, (0, 2), False), num_processes=2, timeout=TIMEOUT, **config
    )
    if kind == "SHARDED_STATE_DICT":
        assert {"pytorch_model_fsdp_0", "optimizer_0"} <= set(saved[0]["files"])
        assert (
            len(list((tmp_path / "ckpt" / "pytorch_model_fsdp_0").glob("*.distcp"))) == 2
        )  # one shard per rank
    else:
        assert {"model_0.bin", "optimizer_0.bin"} <= set(saved[0]["files"])
        full = torch.load(tmp_path / "ckpt" / "model_0.bin", weights_only=True)
        plain = transformer_model()
        plain.load_state_dict(full)  # an unsharded state dict any plain model loads
    on_two = notebook_launch(
        train_with_checkpoint, args=(folder, (0, 2), True), num_processes=2, timeout=TIMEOUT, **config
    )
    on_one = notebook_launch(
        train_with_checkpoint,
        args=(folder, (0, 2), True),
        kwargs=dict(batch_size=16),  # one process, the same 16 samples per step as two processes with 8
        num_processes=1,
        timeout=TIMEOUT,
        **config,
    )
    # resumed on two processes, the run repeats the uninterrupted run's arithmetic: bit for bit
    assert_same_weights(on_two[0]["weights"], uninterrupted["weights"], atol=0)
    # on one process it sums 16 samples where two processes summed 8 + 8: rounding, within the floor
    assert_weights_within_floor(
        on_one[0]["weights"],
        uninterrupted["weights"],
        uninterrupted_floor["weights"],
        f"{kind} on one process",
    )


def test_save_model_writes_the_full_unsharded_weights(tmp_path):
    result = notebook_launch(
        train_and_save_model, args=(str(tmp_path / "model"),), num_processes=2, timeout=TIMEOUT, **fsdp()
    )
    from safetensors.torch import load_file

    saved = load_file(result[0]["path"])
    assert_same_weights(saved, result[0]["weights"], atol=0)
    assert result[1]["weights"] == {}  # the full state dict is gathered (to the CPU) on rank 0 only
    assert all(
        type(t) is torch.Tensor and t.device.type == "cpu" for t in saved.values()
    )  # plain tensors, not DTensor shards
    transformer_model().load_state_dict(saved)


# ------------------------------------------------------------------- what gets wrapped (1 process)
def test_layers_are_chosen_by_class_name_and_by_size():
    from notebook_launcher.runtime.strategies.fsdp import plan as fsdp_plan

    model = transformer_model()
    by_class = FSDPConfig(
        fsdp_auto_wrap_policy="TRANSFORMER_BASED_WRAP", fsdp_transformer_layer_cls_to_wrap=LAYER
    )
    assert fsdp_plan.wrapped_names(model, by_class) == ["blocks.0", "blocks.1"]
    implied = FSDPConfig(fsdp_transformer_layer_cls_to_wrap=f"{LAYER}, Linear")
    assert fsdp_plan.wrap_policy(implied) == "TRANSFORMER_BASED_WRAP"
    assert "embed" in fsdp_plan.wrapped_names(model, implied)
    by_size = FSDPConfig(fsdp_auto_wrap_policy="SIZE_BASED_WRAP", fsdp_min_num_params=1000)
    assert fsdp_plan.wrapped_names(model, by_size) == [
        "blocks.0",
        "blocks.0.self_attn",
        "blocks.1",
        "blocks.1.self_attn",
    ]
    huge = FSDPConfig(fsdp_auto_wrap_policy="SIZE_BASED_WRAP", fsdp_min_num_params=10**9)
    assert fsdp_plan.wrapped_names(model, huge) == []
    assert fsdp_plan.wrapped_names(model, FSDPConfig()) == []  # no policy: the root is the only unit
    layers = fsdp_plan.layers_to_wrap(model, by_size)
    assert layers.index(model.blocks[0].self_attn) < layers.index(model.blocks[0])  # inner units first


def test_unknown_layer_class_is_an_error_listing_the_models_classes():
    from notebook_launcher.runtime.strategies.fsdp import plan as fsdp_plan

    config = FSDPConfig(fsdp_transformer_layer_cls_to_wrap="GPT2Block")
    with pytest.raises(ConfigError) as info:
        fsdp_plan.layers_to_wrap(transformer_model(), config)
    message = str(info.value)
    assert "'GPT2Block'" in message and "TinyTransformer" in message
    for name in ("TransformerEncoderLayer", "MultiheadAttention", "Linear", "LayerNorm"):
        assert name in message


def test_mesh_shapes():
    from notebook_launcher.runtime.strategies.fsdp import plan as fsdp_plan

    assert fsdp_plan.mesh_shape("FULL_SHARD", 8, 4) == (8,)
    assert fsdp_plan.mesh_shape("HYBRID_SHARD", 8, 4) == (2, 4)  # replicate over 2 machines, shard over 4
    assert fsdp_plan.mesh_shape("HYBRID_SHARD", 2, 2) == (1, 2)
    with pytest.raises(ConfigError, match="same number of processes on every machine"):
        fsdp_plan.mesh_shape("HYBRID_SHARD", 6, 4)
