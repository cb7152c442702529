"""Functions the Accelerate-parity tests run on 2 processes (importable, so every start method finds
them). Each returns plain data about what one rank saw; the tests compare ranks and expectations."""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset
from trainers import IndexDataset, mse_steps

from notebook_launcher import Accelerator, PartialState
from notebook_launcher.state import AcceleratorState, GradientState
from notebook_launcher.utils import (
    DataLoaderConfiguration,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    ProfileKwargs,
    ProjectConfiguration,
    set_seed,
)


def _indices(batches) -> list[list[int]]:
    return [b.flatten().long().tolist() for b in batches]


class CountingDataset(Dataset):
    """Sample i is [i]; counts how often this process read a sample."""

    reads = 0

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        CountingDataset.reads += 1
        return torch.tensor([float(i)])


class Stream(IterableDataset):
    """A stream of [0], [1], ... [n-1] that counts how many items this process read."""

    reads = 0

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            Stream.reads += 1
            yield torch.tensor([float(i)])


# ------------------------------------------------------------------------------------------ data
def data_features() -> dict:
    out: dict = {}
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(split_batches=True))
    out["split_batches"] = _indices(acc.prepare(DataLoader(IndexDataset(8), batch_size=4)))
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    out["uneven"] = _indices(acc.prepare(DataLoader(IndexDataset(10), batch_size=4)))

    CountingDataset.reads = 0
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(dispatch_batches=True))
    out["dispatched"] = _indices(acc.prepare(DataLoader(CountingDataset(16), batch_size=4)))
    out["dispatched_reads"] = CountingDataset.reads

    Stream.reads = 0
    acc = Accelerator()  # IterableDataset: dispatched by default, as in Accelerate
    loader = acc.prepare(DataLoader(Stream(10), batch_size=2))
    out["stream"], out["stream_end"] = [], []
    for batch in loader:
        out["stream"].append(batch.flatten().long().tolist())
        out["stream_end"].append(acc.gradient_state.end_of_dataloader)
    out["stream_reads"] = Stream.reads

    acc = Accelerator()
    loader = acc.prepare(DataLoader(IndexDataset(10), batch_size=4))
    out["remainder"], out["end"], out["gathered_objects"] = [], [], []
    for batch in loader:
        out["remainder"].append(GradientState().remainder)
        out["end"].append(GradientState().end_of_dataloader)
        out["gathered_objects"].append(
            acc.gather_for_metrics(batch.flatten().long().tolist(), use_gather_object=True)
        )
    out["remainder_after"] = acc.gradient_state.remainder

    acc = Accelerator(dataloader_config=DataLoaderConfiguration(data_seed=5, use_seedable_sampler=True))
    loader = acc.prepare(DataLoader(IndexDataset(8), batch_size=2, shuffle=True))
    out["data_seed_order"] = _indices(loader)

    acc = Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))
    out["non_blocking"] = _indices(acc.prepare(DataLoader(IndexDataset(4), batch_size=1)))

    acc = Accelerator()
    loader = acc.prepare(DataLoader(IndexDataset(12), batch_size=2))
    out["skipped"] = _indices(acc.skip_first_batches(loader, 2))
    out["after_skip"] = _indices(loader)
    return out


# -------------------------------------------------------------------------------------- training
def _rank_data(acc: Accelerator, n: int = 6) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n * 2, 3, generator=g)
    return DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=1)


def accumulation_features() -> dict:
    out: dict = {}
    for name, plugin in (
        ("sync_each_batch", GradientAccumulationPlugin(num_steps=2, sync_each_batch=True)),
        ("no_sync", GradientAccumulationPlugin(num_steps=2)),
    ):
        acc = Accelerator(gradient_accumulation_plugin=plugin)
        torch.manual_seed(0)
        model, loader = acc.prepare(nn.Linear(3, 1), _rank_data(acc))
        x, y = next(iter(loader))
        with acc.accumulate(model):
            acc.backward(nn.functional.mse_loss(model(x), y))
        out[name] = {
            "sync": acc.sync_gradients,
            "grad": acc.unwrap_model(model).weight.grad.flatten().tolist(),
        }
    for name, plugin in (
        ("with_dataloader", GradientAccumulationPlugin(num_steps=2)),
        ("not_with_dataloader", GradientAccumulationPlugin(num_steps=2, sync_with_dataloader=False)),
    ):
        acc = Accelerator(gradient_accumulation_plugin=plugin)
        model, loader = acc.prepare(nn.Linear(1, 1), DataLoader(IndexDataset(6), batch_size=1))
        flags = []
        for _ in loader:
            with acc.accumulate(model):
                flags.append(acc.sync_gradients)
        out[name] = flags
    out["num_steps_seen_by_gradient_state"] = GradientState().num_steps
    return out


def control_features() -> dict:
    acc = Accelerator()
    out: dict = {}
    if acc.process_index == 1:
        acc.set_trigger()
    out["trigger"] = [acc.check_trigger(), acc.check_trigger()]
    ran = []
    acc.on_process(lambda: ran.append("process_1"), process_index=1)()
    acc.on_process(process_index=0)(lambda: ran.append("process_0"))()
    acc.on_last_process(lambda: ran.append("last"))()
    acc.on_local_process(local_process_index=1)(lambda: ran.append("local_1"))()
    out["ran"] = ran
    state = AcceleratorState()
    out["state"] = {
        "type": type(acc.state).__name__,
        "distributed_type": str(acc.state.distributed_type),
        "shared_distributed_type": str(state.distributed_type),
        "shared_processes": state.num_processes,
        "use_distributed": acc.use_distributed,
        "partial_index": PartialState().process_index,
    }
    model = acc.prepare(nn.Linear(2, 1))
    out["wrapped_keys"] = sorted(acc.get_state_dict(model, unwrap=False))
    out["unwrapped_keys"] = sorted(acc.get_state_dict(model))
    return out


def partial_state_alone() -> dict:
    """PartialState without any Accelerator, as a script doing distributed inference uses it."""
    state = PartialState()
    with state.split_between_processes(["A", "B", "C"]) as mine:
        plain = mine
    with state.split_between_processes(["A", "B", "C"], apply_padding=True) as mine:
        padded = mine
    with state.split_between_processes({"x": [1, 2, 3, 4], "y": ["a", "b", "c", "d"]}) as mine:
        as_dict = mine
    with state.split_between_processes(torch.arange(3), apply_padding=True) as mine:
        tensor = mine.tolist()
    state.wait_for_everyone()
    return {
        "processes": state.num_processes,
        "index": state.process_index,
        "distributed_type": str(state.distributed_type),
        "plain": plain,
        "padded": padded,
        "dict": as_dict,
        "tensor": tensor,
        "is_last": state.is_last_process,
    }


def dynamo_losses(backend: str | None) -> dict:
    set_seed(0)
    acc = Accelerator(dynamo_backend=backend)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 4, generator=g)
    model, opt, loader = acc.prepare(
        model, opt, DataLoader(torch.utils.data.TensorDataset(x, x[:, :1]), batch_size=2)
    )
    losses = mse_steps(acc, model, opt, loader)
    return {"compiled": hasattr(model, "_orig_mod"), "losses": losses}


def uneven_with_join(join: bool) -> dict:
    """even_batches=False over 5 batches: rank 0 takes 3 steps, rank 1 two; Join keeps DDP in step."""
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    torch.manual_seed(0)
    model = nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, loader = acc.prepare(model, opt, DataLoader(IndexDataset(10), batch_size=2))
    steps = 0
    with acc.join_uneven_inputs([model]) if join else _nothing():
        for x in loader:
            acc.backward(model(x).pow(2).mean())
            opt.step()
            opt.zero_grad()
            steps += 1
    return {"steps": steps, "weight": acc.unwrap_model(model).weight.item()}


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def profile_features(folder: str) -> dict:
    calls = []
    handler = ProfileKwargs(
        schedule_option={"wait": 1, "warmup": 1, "active": 1, "repeat": 1},
        on_trace_ready=lambda p: calls.append(1),
    )
    acc = Accelerator(kwargs_handlers=[handler])
    with acc.profile() as prof:
        for _ in range(4):
            torch.mm(torch.ones(8, 8), torch.ones(8, 8))
            prof.step()
    with acc.profile(ProfileKwargs(output_trace_dir=folder, record_shapes=True)):
        torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    return {"trace_ready_calls": len(calls), "files": sorted(os.listdir(folder))}


def fsdp_plugin_step() -> dict:
    plugin = FullyShardedDataParallelPlugin(reshard_after_forward=False, state_dict_type="FULL_STATE_DICT")
    acc = Accelerator(fsdp_plugin=plugin)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    acc.backward(model(torch.ones(2, 4)).sum())
    opt.step()
    weight = next(iter(model.parameters()))
    return {
        "distributed_type": str(acc.distributed_type),
        "reshard_after_forward": acc.config.fsdp_config.fsdp_reshard_after_forward,
        "sharded": type(weight).__name__ == "DTensor",
        "full_rows": acc.get_state_dict(model).get("0.weight", torch.empty(0)).shape[0],  # rank 0 only
    }


# ----------------------------------------------------------------------------------- checkpoints
def _weights(acc: Accelerator, model: nn.Module) -> list[float]:
    return acc.unwrap_model(model).weight.flatten().tolist()


def _bump(acc: Accelerator, model: nn.Module) -> None:
    with torch.no_grad():
        acc.unwrap_model(model).weight.add_(1.0)


def checkpoint_features(project: str) -> dict:
    out: dict = {}
    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=2)
    acc = Accelerator(project_config=config)
    model = acc.prepare(nn.Linear(2, 1))

    def write_config(models, weights, output_dir):
        if acc.is_main_process:
            with open(os.path.join(output_dir, "config.json"), "w") as fp:
                fp.write('{"hidden": 2}')

    handle = acc.register_save_state_pre_hook(write_config)
    for _ in range(4):
        _bump(acc, model)
        acc.save_state()
    handle.remove()
    out["saved"] = _weights(acc, model)
    out["after_four_saves"] = sorted(os.listdir(os.path.join(project, "checkpoints")))
    out["latest_files"] = sorted(os.listdir(os.path.join(project, "checkpoints", "checkpoint_3")))
    out["iteration"] = acc.save_iteration

    _bump(acc, model)
    skip = acc.register_load_state_pre_hook(lambda models, input_dir: models.clear())
    acc.load_state()
    out["with_skipping_load_hook"] = _weights(acc, model)
    skip.remove()
    acc.load_state()
    out["loaded_latest"] = _weights(acc, model)
    out["iteration_after_load"] = acc.save_iteration

    drop = acc.register_save_state_pre_hook(lambda models, weights, output_dir: weights.clear())
    written = acc.save_state("ignored: automatic naming decides the folder, as in Accelerate")
    drop.remove()
    out["no_weights_folder"] = written.name
    out["no_weights_files"] = sorted(os.listdir(written))

    one = ProjectConfiguration(
        project_dir=os.path.join(project, "one"), automatic_checkpoint_naming=True, total_limit=1
    )
    acc = Accelerator(project_config=one)
    model = acc.prepare(nn.Linear(2, 1))
    acc.save_state()

    def crash(models, weights, output_dir):
        raise OSError("disk full (simulated)")

    crashing = acc.register_save_state_pre_hook(crash)
    try:
        acc.save_state()
    except OSError:
        out["crash_raised"] = True
    crashing.remove()
    out["after_crash"] = sorted(
        p for p in os.listdir(os.path.join(project, "one", "checkpoints")) if not p.startswith(".")
    )
    acc.save_state()
    out["after_next_save"] = sorted(
        p for p in os.listdir(os.path.join(project, "one", "checkpoints")) if not p.startswith(".")
    )

    later = ProjectConfiguration(
        project_dir=os.path.join(project, "later"), automatic_checkpoint_naming=True, iteration=10
    )
    acc = Accelerator(project_config=later)
    acc.prepare(nn.Linear(2, 1))
    out["explicit_iteration"] = acc.save_state().name
    return out


def save_model_features(folder: str) -> dict:
    acc = Accelerator()
    torch.manual_seed(0)
    model = acc.prepare(nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)))
    acc.save_model(model, os.path.join(folder, "safe"))
    acc.save_model(model, os.path.join(folder, "sharded"), max_shard_size=100)
    first = sorted(os.listdir(os.path.join(folder, "sharded")))
    acc.save_model(model, os.path.join(folder, "sharded"), max_shard_size=1200)
    acc.save_model(model, os.path.join(folder, "pickle"), safe_serialization=False)
    return {
        "weights": {k: v.clone() for k, v in acc.get_state_dict(model).items()},
        "safe": sorted(os.listdir(os.path.join(folder, "safe"))),
        "sharded_first": first,
        "sharded": sorted(os.listdir(os.path.join(folder, "sharded"))),
        "pickle": sorted(os.listdir(os.path.join(folder, "pickle"))),
    }
