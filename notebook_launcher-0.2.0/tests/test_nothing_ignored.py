"""Nothing a user sets is silently ignored: each setting is applied (and observed) or refused with
an error naming the value and the fix. notebook_launch's agent-only settings, debug mode,
in_process with worker options, DeepSpeed's zero3_init_flag / multinode launcher / JSON file vs
fields, InitProcessGroupKwargs(backend, init_method), rng_types, save(safe_serialization=True),
and a DeepSpeed fp16 overflow that must not step the LR scheduler."""

import json
import sys
import types

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from notebook_launcher import WorkerError, notebook_launch
from notebook_launcher.config import LaunchConfig
from notebook_launcher.errors import AcceleratorError, ConfigError


def rank():
    from notebook_launcher import Accelerator

    return Accelerator().process_index


# ---------------------------------------------------- settings only torchrun's agent can apply
def test_restarts_over_several_machines_are_refused_by_notebook_launch():
    with pytest.raises(ConfigError, match="restarts the workers of one machine only") as error:
        notebook_launch(rank, num_processes=1, max_restarts=2, num_nodes=2, master_addr="127.0.0.1")
    assert "notebook-launcher launch" in str(error.value)


def test_agent_settings_are_honoured():
    """rdzv_backend c10d (our store serves on one machine) and any monitor_interval are met as they are."""
    result = notebook_launch(
        rank, num_processes=1, max_restarts=0, monitor_interval=0.01, rdzv_backend="c10d", quiet=True
    )
    assert list(result) == [0]


# -------------------------------------------------------------------------------- debug mode
def gather_mismatched(width_of_rank_1):
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    width = width_of_rank_1 if accelerator.process_index == 1 else 3
    return accelerator.gather(torch.ones(2, width)).shape


def test_debug_makes_collectives_check_shapes_across_ranks():
    """Accelerate's debug mode: a gather of tensors whose trailing shapes differ names each rank's
    shape on every rank (without it, the all_gather would fail deep in gloo or hang)."""
    with pytest.raises(WorkerError) as failure:
        notebook_launch(gather_mismatched, args=(5,), num_processes=2, debug=True, quiet=True, timeout=60)
    assert failure.value.exc_type == "DistributedOperationException"
    assert "rank 0: [('*', 3), 'cpu']" in str(failure.value) or "rank 0: (('*', 3), 'cpu')" in str(
        failure.value
    )
    assert "rank 1" in str(failure.value) and "5" in str(failure.value)
    same = notebook_launch(gather_mismatched, args=(3,), num_processes=2, debug=True, quiet=True, timeout=60)
    assert list(same) == [torch.Size([4, 3])] * 2  # matching shapes pass the check


# -------------------------------------------------------------------------------- in_process
@pytest.mark.parametrize(
    "option",
    [{"timeout": 5}, {"start_method": "spawn"}, {"master_port": 29555}, {"quiet": True}, {"view": True}],
)
def test_in_process_refuses_options_it_cannot_apply(option):
    name = next(iter(option))
    with pytest.raises(ConfigError, match=f"in_process=True runs fn in this process, so {name}="):
        notebook_launch(rank, in_process=True, **option)


# ------------------------------------------------------------------------------- DeepSpeed keys
def deepspeed(**fields):
    return LaunchConfig(distributed_type="DEEPSPEED", deepspeed_config=fields)


def test_zero3_init_flag_needs_stage_3():
    with pytest.raises(ConfigError, match="zero3_init_flag=True builds models already partitioned"):
        deepspeed(zero_stage=2, zero3_init_flag=True)
    assert deepspeed(zero_stage=3, zero3_init_flag=True).deepspeed_config.zero3_init_flag


def test_zero3_init_flag_registers_the_config_with_transformers(monkeypatch):
    from notebook_launcher.runtime.strategies.deepspeed.zero3_init import register_with_transformers

    seen = []

    class HfDeepSpeedConfig:  # transformers' class, as from_pretrained consults it
        def __init__(self, config):
            seen.append(config)

    integrations = types.ModuleType("transformers.integrations")
    integrations.HfDeepSpeedConfig = HfDeepSpeedConfig
    integrations.unset_hf_deepspeed_config = lambda: seen.append("unset")
    monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))
    monkeypatch.setitem(sys.modules, "transformers.integrations", integrations)
    kept = register_with_transformers(deepspeed(zero_stage=3, zero3_init_flag=True), world_size=2)
    assert isinstance(kept, HfDeepSpeedConfig)
    assert seen[0] == "unset" and seen[1]["zero_optimization"]["stage"] == 3
    assert register_with_transformers(deepspeed(zero_stage=3), world_size=2) is None  # flag off: nothing

    # Not installed: nothing to register; the flag still acts through accelerator.sharded_init()
    # (zero.Init for plain torch models, tests/test_sharded_init.py).
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.delitem(sys.modules, "transformers.integrations")
    assert register_with_transformers(deepspeed(zero_stage=3, zero3_init_flag=True), world_size=2) is None


def test_deepspeed_multinode_launcher():
    with pytest.raises(ConfigError, match="deepspeed_multinode_launcher='mpi'.*'standard'"):
        deepspeed(deepspeed_multinode_launcher="mpi")
    with pytest.raises(ConfigError, match="cannot hand them to pdsh/MPI"):
        LaunchConfig(
            distributed_type="DEEPSPEED",
            num_machines=2,
            main_process_ip="10.0.0.1",
            deepspeed_config={"deepspeed_multinode_launcher": "pdsh"},
        )
    # One machine: no multi-machine launcher is involved (as in Accelerate), so any valid value is fine.
    assert (
        deepspeed(deepspeed_multinode_launcher="pdsh").deepspeed_config.deepspeed_multinode_launcher == "pdsh"
    )


def test_a_deepspeed_file_and_different_fields_are_refused(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(
        json.dumps(
            {
                "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
                "gradient_clipping": 1.0,
            }
        )
    )
    for fields, key in [
        ({"zero_stage": 1}, "zero_optimization.stage=3"),
        ({"offload_param_device": "cpu"}, "zero_optimization.offload_param.device='none'"),
        ({"gradient_clipping": 0.5}, "gradient_clipping=1.0"),
    ]:
        with pytest.raises(ConfigError, match=key):
            deepspeed(deepspeed_config_file=str(path), **fields)
    # Unset fields, or fields that say what the file says, are fine.
    deepspeed(deepspeed_config_file=str(path))
    deepspeed(
        deepspeed_config_file=str(path), zero_stage=3, offload_optimizer_device="cpu", gradient_clipping=1.0
    )
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    with pytest.raises(ConfigError, match="zero3_init_flag=True"):
        deepspeed(deepspeed_config_file=str(path), zero3_init_flag=True)


def test_deepspeed_fp16_overflow_does_not_step_the_scheduler():
    """DeepSpeed scales fp16 losses itself and skips the step on overflow (was_step_applied() is
    False); the Accelerator's scheduler must then stay put, as with our own GradScaler. CPU DeepSpeed
    has no fp16, so the engine here is a stand-in answering like the real one after each step."""
    from notebook_launcher.runtime.data import GradientState
    from notebook_launcher.runtime.precision.mixed import Precision
    from notebook_launcher.runtime.strategies.deepspeed.strategy import EngineOptimizer
    from notebook_launcher.runtime.wrappers import AcceleratedOptimizer, AcceleratedScheduler

    class Engine:
        applied = True

        def was_step_applied(self):
            return self.applied

    engine = Engine()
    user_optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    state = GradientState()
    optimizer = AcceleratedOptimizer(
        EngineOptimizer(engine, user_optimizer), Precision("no", torch.device("cpu")), state
    )
    scheduler = AcceleratedScheduler(
        torch.optim.lr_scheduler.StepLR(user_optimizer, step_size=1, gamma=0.5),
        [optimizer],
        state,
        num_processes=1,
        split_batches=False,
        step_with_optimizer=True,
    )
    lrs = []
    for applied in (True, False, True):  # the second step overflowed
        engine.applied = applied
        optimizer.step()
        scheduler.step()
        lrs.append((optimizer.step_was_skipped, scheduler.get_last_lr()[0]))
    assert lrs == [(False, 0.5), (True, 0.5), (False, 0.25)]


# -------------------------------------------------------------------- InitProcessGroupKwargs
def group_made_with(init_method, backend):
    import torch.distributed as dist

    from notebook_launcher import Accelerator, InitProcessGroupKwargs

    accelerator = Accelerator(
        kwargs_handlers=[InitProcessGroupKwargs(backend=backend, init_method=init_method)]
    )
    store = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    return type(store).__name__, accelerator.state.backend


def test_init_process_group_kwargs_backend_and_init_method_are_applied(tmp_path):
    init_method = f"file://{tmp_path / 'rendezvous'}"
    result = notebook_launch(
        group_made_with, args=(init_method, "gloo"), num_processes=2, quiet=True, timeout=60
    )
    assert list(result) == [("FileStore", "gloo")] * 2  # the group met through the file, not our TCPStore


def test_init_process_group_kwargs_backend_is_checked():
    from notebook_launcher.runtime.world.state import _check_backend

    with pytest.raises(AcceleratorError, match=r"backend='bogus'\) is not a torch.distributed backend"):
        _check_backend("bogus", torch.device("cpu"))
    with pytest.raises(AcceleratorError, match="needs CUDA GPUs, but this process runs on 'cpu'"):
        _check_backend("nccl", torch.device("cpu"))
    assert _check_backend("cpu:gloo,cuda:nccl", torch.device("cpu")) == "cpu:gloo,cuda:nccl"


# --------------------------------------------------------------------------------- rng_types
def random_draws_per_epoch(rng_types):
    from notebook_launcher import Accelerator

    accelerator = Accelerator(rng_types=rng_types)
    torch.manual_seed(100 + accelerator.process_index)  # each rank's generator starts elsewhere
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2))
    draws = []
    for _ in range(2):
        for _batch in loader:
            draws.append(torch.rand(1).item())  # e.g. a random augmentation in the loop
    return draws


@pytest.mark.parametrize("rng_types, same", [(["torch"], True), (None, False)])
def test_rng_types_torch_makes_every_rank_draw_alike(rng_types, same):
    result = notebook_launch(
        random_draws_per_epoch, args=(rng_types,), num_processes=2, quiet=True, timeout=60
    )
    assert (result[0] == result[1]) is same


def test_rng_types_are_checked():
    from notebook_launcher.runtime.world.rng_sync import check_rng_types

    cpu = torch.device("cpu")
    assert check_rng_types(["generator", "torch"], cpu) == ["torch"]  # the loader's own: always agreed
    with pytest.raises(AcceleratorError, match="contains 'xla'"):
        check_rng_types(["xla"], cpu)
    with pytest.raises(AcceleratorError, match="this process runs on 'cpu'"):
        check_rng_types(["cuda"], cpu)


# ------------------------------------------------------------------------ safe_serialization
def save_both_ways(folder):
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Linear(3, 2)
    state = {**model.state_dict(), "tied": model.weight}  # shares memory with "weight"
    accelerator.save(state, f"{folder}/weights.safetensors", safe_serialization=True)
    saved = accelerator.save_model(model, f"{folder}/model", safe_serialization=True)
    try:
        accelerator.save([1, 2], f"{folder}/list.safetensors", safe_serialization=True)
    except AcceleratorError as error:
        refused = str(error)
    return {k: v.clone() for k, v in state.items()}, str(saved), refused


def test_save_with_safe_serialization_writes_safetensors(tmp_path):
    from safetensors.torch import load_file

    state, saved, refused = notebook_launch(save_both_ways, args=(str(tmp_path),), in_process=True)[0]
    written = tmp_path / "weights.safetensors"
    assert not written.read_bytes().startswith(b"PK")  # not torch.save's zip archive
    loaded = load_file(written)
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    assert saved.endswith("model.safetensors") and set(load_file(saved)) == {"weight", "bias"}
    assert "holds a dict of named tensors only; got list" in refused
    assert not (tmp_path / "list.safetensors").exists()
