"""DeepSpeed ZeRO 1/2/3 through notebook_launch on 2 CPU processes (gloo, DeepSpeed's CPU accelerator).

Tolerances (fp32): no fixed figure. ZeRO sums in another order than DDP (ZeRO-3 also computes the
linear layers' gradients with its own kernels), so the two differ by rounding, which training
carries forward by an amount that depends on the CPU (ZeRO-3 vs DDP: below 1e-5 on one machine,
6.9e-5 on an AMD EPYC). Each comparison allows a multiple of the noise floor measured here, on this
machine: the reference once more with every weight nudged by one ulp before each step (noise_floor.py).
With AdamW the per-step losses are compared, with SGD+momentum the weights: AdamW turns the rounding
noise of the attention key bias (whose true gradient is zero) into full-size weight steps, which the
losses do not see. A resume repeats the same arithmetic and is compared bit for bit. Skipped, with
the reason, where DeepSpeed cannot be imported.
"""

import json

import pytest
import torch
from deepspeed_import import import_deepspeed_or_skip
from noise_floor import (
    assert_losses_within_floor,
    assert_weights_within_floor,
    weight_gap,
    weights_bound,
)
from sharding_trainers import (
    SGD,
    assert_same_weights,
    train_and_save_model,
    train_seed_model,
    train_transformer,
    train_with_checkpoint,
    transformer_data,
    transformer_model,
)
from trainers import reference_weights

from notebook_launcher import notebook_launch


@pytest.fixture(scope="module", autouse=True)
def deepspeed_imported():
    """DeepSpeed imported once, before this file's first launch, so forked workers inherit it (muon
    pulls torch._inductor in); here rather than at import, which every xdist worker's collection
    would pay (~3 s of CPU each)."""
    import_deepspeed_or_skip("deepspeed.runtime.zero.muon.muon_optimizer")


TIMEOUT = 300


def zero(stage: int, **fields) -> dict:
    return dict(distributed_type="DEEPSPEED", deepspeed_config={"zero_stage": stage, **fields})


@pytest.fixture(scope="module")
def ddp():
    return notebook_launch(train_transformer, kwargs=dict(batch_size=8), num_processes=2, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def ddp_sgd():
    return notebook_launch(train_transformer, kwargs=SGD, num_processes=2, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def ddp_floor():
    """The ddp fixture's training with every weight nudged by one ulp before each step: its noise floor."""
    return notebook_launch(
        train_transformer, kwargs=dict(batch_size=8, nudge=True), num_processes=2, timeout=TIMEOUT
    )[0]


@pytest.fixture(scope="module")
def ddp_sgd_floor():
    return notebook_launch(train_transformer, kwargs=dict(SGD, nudge=True), num_processes=2, timeout=TIMEOUT)[
        0
    ]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stage_matches_ddp_on_the_transformer(stage, ddp, ddp_sgd, ddp_floor, ddp_sgd_floor):
    result = notebook_launch(
        train_transformer,
        kwargs=dict(batch_size=8),
        num_processes=2,
        timeout=TIMEOUT,
        **zero(stage, gradient_clipping=0.5),
    )
    assert_losses_within_floor(
        result[0]["losses"], ddp[0]["losses"], ddp_floor["losses"], f"ZeRO-{stage} AdamW"
    )  # AdamW: per-step losses
    assert_same_weights(result[1]["weights"], result[0]["weights"], atol=0)  # every rank gets full weights
    sgd = notebook_launch(
        train_transformer, kwargs=SGD, num_processes=2, timeout=TIMEOUT, **zero(stage, gradient_clipping=0.5)
    )
    what = f"ZeRO-{stage} SGD"  # SGD: the weights themselves, and the losses
    assert_weights_within_floor(sgd[0]["weights"], ddp_sgd[0]["weights"], ddp_sgd_floor["weights"], what)
    assert_losses_within_floor(sgd[0]["losses"], ddp_sgd[0]["losses"], ddp_sgd_floor["losses"], what)
    total, local = result[0]["total_numel"], [result[r]["local_numel"] for r in (0, 1)]
    if stage == 3:  # parameters themselves are partitioned
        assert sum(local) >= total and all(n <= 0.55 * total for n in local), (local, total)
    else:
        assert local == [total, total]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stage_trains_the_seed_model_to_the_reference_weights(stage):
    result = notebook_launch(
        train_seed_model, kwargs=dict(batch_size=8), num_processes=2, timeout=TIMEOUT, **zero(stage)
    )
    want = reference_weights(batch_size=16)  # one process, 16 samples summed at once: rounding apart
    assert_weights_within_floor(
        result[0], want, reference_weights(batch_size=16, nudge=True), f"ZeRO-{stage}"
    )


def test_accumulation_equals_the_larger_batch():
    accumulated = notebook_launch(
        train_seed_model,
        kwargs=dict(batch_size=8, accumulation=2),
        num_processes=2,
        timeout=TIMEOUT,
        **zero(2),
    )
    want, floor = (reference_weights(batch_size=32, nudge=nudge) for nudge in (False, True))
    assert_weights_within_floor(accumulated[0], want, floor, "accumulation under ZeRO-2")


@pytest.mark.parametrize("stage", [1, 3])
def test_a_learning_rate_scheduler_reaches_the_engine(stage):
    kwargs = dict(batch_size=8, scheduler=True)
    ddp, floor = (
        notebook_launch(train_seed_model, kwargs=dict(kwargs, nudge=nudge), num_processes=2, timeout=TIMEOUT)[
            0
        ]
        for nudge in (False, True)
    )
    deep = notebook_launch(train_seed_model, kwargs=kwargs, num_processes=2, timeout=TIMEOUT, **zero(stage))
    assert_weights_within_floor(deep[0], ddp, floor, f"ZeRO-{stage} with a scheduler")
    unscheduled = reference_weights(batch_size=16)
    assert weight_gap(deep[0], unscheduled) > 100 * weights_bound(ddp, floor)  # the schedule mattered


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_save_state_and_load_state_round_trip(stage, tmp_path):
    folder = str(tmp_path / "ckpt")
    config = zero(stage)
    whole = notebook_launch(
        train_with_checkpoint, args=(folder, None, False), num_processes=2, timeout=TIMEOUT, **config
    )
    saved = notebook_launch(
        train_with_checkpoint, args=(folder, (0, 2), False), num_processes=2, timeout=TIMEOUT, **config
    )
    assert "deepspeed" in saved[0]["files"]  # the engine's own checkpoint folder
    resumed = notebook_launch(
        train_with_checkpoint, args=(folder, (0, 2), True), num_processes=2, timeout=TIMEOUT, **config
    )
    # the resumed run repeats the uninterrupted run's arithmetic on the same machine: bit for bit
    assert_same_weights(resumed[0]["weights"], whole[0]["weights"], atol=0)


ACCELERATE_STYLE_DS_CONFIG = {
    "fp16": {"enabled": "auto"},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
        "stage": 2,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": "auto",
        "offload_optimizer": {"device": "none"},
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "steps_per_print": 2000,
    "wall_clock_breakdown": False,
}


def test_a_ds_config_json_file_with_auto_values_trains_like_ddp(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(ACCELERATE_STYLE_DS_CONFIG, indent=2))
    kwargs = dict(batch_size=8, clip=None)
    ddp, floor = (
        notebook_launch(
            train_transformer, kwargs=dict(kwargs, nudge=nudge), num_processes=2, timeout=TIMEOUT
        )[0]
        for nudge in (False, True)
    )
    result = notebook_launch(
        train_transformer,
        kwargs=kwargs,
        num_processes=2,
        timeout=TIMEOUT,
        distributed_type="DEEPSPEED",
        deepspeed_config={"deepspeed_config_file": str(path)},
    )
    assert_losses_within_floor(result[0]["losses"], ddp["losses"], floor["losses"], "ds_config.json")


def test_zero3_save_model_gathers_the_full_weights(tmp_path):
    result = notebook_launch(
        train_and_save_model, args=(str(tmp_path / "model"),), num_processes=2, timeout=TIMEOUT, **zero(3)
    )
    from safetensors.torch import load_file

    saved = load_file(result[0]["path"])
    assert_same_weights(saved, result[0]["weights"], atol=0)
    plain = transformer_model()
    assert {k: v.shape for k, v in saved.items()} == {k: v.shape for k, v in plain.state_dict().items()}
    plain.load_state_dict(saved)


def held_bytes() -> dict:
    """Bytes this rank holds for parameters, fp32 master partitions and AdamW state after one step,
    each storage counted once (a tensor that shares another's memory costs nothing more)."""
    from notebook_launcher import Accelerator

    acc = Accelerator()
    model = transformer_model()
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    x, y = transformer_data()[:8]
    acc.backward(torch.nn.functional.mse_loss(model(x), y))
    opt.step()
    opt.zero_grad()
    engine_optimizer = getattr(model, "optimizer", None)  # the DeepSpeed engine's ZeRO optimizer
    if engine_optimizer is not None:
        params = [p.ds_tensor for p in model.module.parameters()]
        tensors = params + list(engine_optimizer.fp32_partitioned_groups_flat)
        state = engine_optimizer.optimizer.state
    else:
        params = list(model.parameters())
        tensors, state = list(params), opt.optimizer.state
    tensors += [
        t for per_param in state.values() for t in per_param.values() if torch.is_tensor(t) and t.dim()
    ]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    acc.end_training()
    return {"bytes": sum(storages.values()), "param_bytes": sum(p.numel() * p.element_size() for p in params)}


def test_zero3_in_fp32_holds_half_of_ddps_parameter_and_optimizer_bytes():
    """DeepSpeed would keep a second fp32 copy of each partition (strategies/deepspeed/memory.py says why it
    should not); with the copy shared, ZeRO-3 at 2 ranks holds what FSDP does: about half."""
    ddp = notebook_launch(held_bytes, num_processes=2, timeout=TIMEOUT)
    zero3 = notebook_launch(held_bytes, num_processes=2, timeout=TIMEOUT, **zero(3))
    for rank in (0, 1):
        assert zero3[rank]["param_bytes"] <= 0.55 * ddp[rank]["param_bytes"]
        assert zero3[rank]["bytes"] <= 0.55 * ddp[rank]["bytes"], (zero3[rank], ddp[rank])


def inner_optimizer_type() -> str:
    from notebook_launcher import Accelerator

    acc = Accelerator()
    model = transformer_model()
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    name = type(model.optimizer.optimizer).__name__  # the engine's ZeRO optimizer wraps this one
    acc.end_training()
    return name


@pytest.mark.slow  # the first use on a machine compiles DeepSpeed's CPU Adam (~2.5 min), then ~10 s
def test_optimizer_offload_runs_adamw_as_deepspeed_cpu_adam_and_matches_ddp(ddp, ddp_floor):
    offload = zero(2, offload_optimizer_device="cpu", gradient_clipping=0.5)
    assert (
        notebook_launch(inner_optimizer_type, num_processes=2, timeout=TIMEOUT, **offload)[0]
        == "DeepSpeedCPUAdam"
    )
    result = notebook_launch(
        train_transformer, kwargs=dict(batch_size=8), num_processes=2, timeout=TIMEOUT, **offload
    )
    # DeepSpeedCPUAdam rounds each update its own way (its own vector kernels): within the floor
    assert_losses_within_floor(result[0]["losses"], ddp[0]["losses"], ddp_floor["losses"], "DeepSpeedCPUAdam")
