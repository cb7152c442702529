"""Training functions for the pipeline tests (issue 35): a small residual net written as an
nn.Sequential (embed, layers.0..N-1, head), trained through the Accelerator with pp_size > 1, or in one
plain process on the same global batches (the reference, and the same reference nudged by one ulp per
step for the noise floor, tests/noise_floor.py)."""

from __future__ import annotations

import gc
import weakref
from collections import OrderedDict

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
from trainers import nudge_weights

FEATURES, WIDTH, HIDDEN = 8, 16, 32
PLAN = {"layers.*.up_proj": "colwise", "layers.*.down_proj": "rowwise"}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up_proj = nn.Linear(WIDTH, HIDDEN)
        self.down_proj = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down_proj(torch.tanh(self.up_proj(x)))


def make_model(blocks: int = 4) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            embed=nn.Linear(FEATURES, WIDTH),
            layers=nn.Sequential(*(Block() for _ in range(blocks))),
            head=nn.Linear(WIDTH, 1),
        )
    )


def make_data(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, FEATURES, generator=g)
    y = x.sum(dim=-1, keepdim=True).tanh()
    return TensorDataset(x, y)


class CountingData(TensorDataset):
    """make_data() that counts the samples this process read from it (a pipeline's middle stage: none)."""

    def __init__(self) -> None:
        super().__init__(*make_data().tensors)
        self.read = 0

    def __getitem__(self, index):
        self.read += 1
        return super().__getitem__(index)


class CountingStream(IterableDataset):
    """make_data() as a stream that counts the samples this process iterated (a middle stage: none)."""

    def __init__(self) -> None:
        self.data = make_data()
        self.read = 0

    def __iter__(self):
        for index in range(len(self.data)):
            self.read += 1
            yield self.data[index]


def reference(
    batch: int,
    steps: int,
    *,
    accumulate: int = 1,
    clip: float | None = None,
    blocks: int = 4,
    nudge: bool = False,
) -> dict:
    """One process, the same global batches: the weights (and losses) every pipeline must end with."""
    model = make_model(blocks)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(make_data(), batch_size=batch)
    losses = []
    for i, (x, y) in enumerate(loader):
        if i >= steps * accumulate:
            break
        if nudge and i % accumulate == 0:
            nudge_weights(model.parameters(), i)
        loss = nn.functional.mse_loss(model(x), y)
        losses.append(loss.item())
        (loss / accumulate).backward()
        if (i + 1) % accumulate == 0:
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad()
    x, y = make_data()[:batch]
    with torch.no_grad():
        eval_loss = nn.functional.mse_loss(model(x), y).item()
    return {
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "losses": losses,
        "eval_loss": eval_loss,
    }


def train_pipeline(
    sizes: dict,
    batch: int,
    steps: int,
    *,
    schedule: str = "1f1b",
    n_microbatches: int | None = None,
    virtual_stages: int | None = None,
    split_points: list | None = None,
    accumulate: int = 1,
    clip: float | None = None,
    blocks: int = 4,
    loss_in_step: bool = False,
    mixed_precision: str = "no",
    stream: str | None = None,
) -> dict:
    """Train on a mesh with pp_size > 1; returns this rank's facts and (rank 0) the full weights.

    stream: None (a map-style dataset), "dispatch" (a stream under dispatch_batches, the default for
    one) or "shards" (a stream every reading rank reads, dispatch_batches=False)."""
    from notebook_launcher import Accelerator, DataLoaderConfiguration, ParallelismConfig
    from notebook_launcher.utils import TorchPipelineParallelConfig, TorchTensorParallelConfig

    pipeline = TorchPipelineParallelConfig(
        schedule=schedule,
        n_microbatches=n_microbatches,
        virtual_stages=virtual_stages,
        split_points=split_points,
        loss_fn=None if loss_in_step else nn.functional.mse_loss,
    )
    tp = TorchTensorParallelConfig(plan=PLAN) if sizes.get("tp_size", 1) > 1 else None
    accelerator = Accelerator(
        parallelism_config=ParallelismConfig(**sizes, pp_handler=pipeline, tp_handler=tp),
        gradient_accumulation_steps=accumulate,
        mixed_precision=mixed_precision,
        dataloader_config=DataLoaderConfiguration(dispatch_batches=None if stream != "shards" else False),
    )
    model = make_model(blocks)
    whole = sum(p.numel() for p in model.parameters())
    last_block = weakref.ref(model.layers[-1].up_proj.weight)  # the first stage never holds it
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = CountingData() if stream is None else CountingStream()
    loader = DataLoader(data, batch_size=batch)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    gc.collect()
    losses, norms, rows = [], [], set()
    for i, (x, y) in enumerate(loader):
        if i >= steps * accumulate:
            break
        x, y = x.to(accelerator.device), y.to(accelerator.device)  # a loop written for one process
        rows.add((tuple(x.shape), x.dtype, tuple(y.shape)))
        with accelerator.accumulate(model):
            loss = model.step(x, target=y, loss_fn=nn.functional.mse_loss if loss_in_step else None)
            accelerator.backward(loss)  # a no-op: step ran backward
            losses.append(loss.item())
            if clip is not None and accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), clip)))
            opt.step()
            opt.zero_grad()
    state = accelerator.get_state_dict(model)
    x, y = make_data()[:batch]
    try:
        eval_loss = model.eval_step(x, target=y).item()  # forward only, after training
    except Exception as exc:  # noqa: BLE001 - the multi-stage schedules refuse it, with the reason
        eval_loss = f"{type(exc).__name__}: {exc}"
    return {
        "weights": {k: v.detach().cpu().float().clone() for k, v in state.items()},
        "eval_loss": eval_loss,
        "losses": losses,
        "norms": norms,
        "stages": list(model.stage_ids),
        "local_keys": sorted(model.state_dict()),
        "local_params": sum(p.numel() for p in opt.param_groups[0]["params"]),  # shards count their piece
        "whole_params": whole,
        "last_block_freed": last_block() is None,
        "mesh_dims": accelerator.torch_device_mesh.mesh_dim_names,
        "samples_read": data.read,
        "batch_shapes": sorted(rows),
        "ideal_bubble": model.timeline.ideal,
        "position": (loader.state_dict()["epoch"], loader.state_dict()["batches_yielded"]),
    }


def cases(items: list) -> list:
    """Several pipelines one after another in the same processes (one launch for the lot)."""
    return [train_pipeline(*args, **kwargs) for args, kwargs in items]


def save_and_resume(sizes: dict, batch: int, folder: str, schedule: str = "1f1b") -> dict:
    """Train 2 steps, save_state, train 2 more; a fresh model and optimizer load_state and train the
    same 2: both must end equal. save_model's safetensors must hold the full weights."""
    from notebook_launcher import Accelerator, ParallelismConfig
    from notebook_launcher.utils import TorchPipelineParallelConfig

    def setup():
        pipeline = TorchPipelineParallelConfig(schedule=schedule, loss_fn=nn.functional.mse_loss)
        accelerator = Accelerator(parallelism_config=ParallelismConfig(**sizes, pp_handler=pipeline))
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        loader = DataLoader(make_data(), batch_size=batch)
        return accelerator, *accelerator.prepare(model, opt, loader)

    def steps(model, opt, batches):
        for x, y in batches:
            model.step(x, target=y)
            opt.step()
            opt.zero_grad()

    accelerator, model, opt, loader = setup()
    batches = list(loader)
    steps(model, opt, batches[:2])
    accelerator.save_state(f"{folder}/ckpt")
    steps(model, opt, batches[2:4])
    straight = accelerator.get_state_dict(model)
    accelerator.save_model(model, f"{folder}/model")
    accelerator.wait_for_everyone()
    accelerator2, model2, opt2, _ = setup()
    accelerator2.load_state(f"{folder}/ckpt")
    steps(model2, opt2, batches[2:4])
    resumed = accelerator2.get_state_dict(model2)
    return {"straight": straight, "resumed": resumed}


def cases_and_resume(items: list, sizes: dict, folder: str, schedule: str) -> tuple:
    """cases(items), then save_and_resume on that mesh and schedule, in one launch."""
    return cases(items), save_and_resume(sizes, 8, folder, schedule)


def misuses() -> list:
    """What a pipeline refuses, inside real ranks: each message (every rank raises alike, none waits)."""
    from notebook_launcher import Accelerator, ParallelismConfig
    from notebook_launcher.utils import TorchPipelineParallelConfig

    def prepared(**settings):
        pipeline = TorchPipelineParallelConfig(loss_fn=nn.functional.mse_loss, **settings)
        accelerator = Accelerator(parallelism_config=ParallelismConfig(pp_size=2, pp_handler=pipeline))
        return accelerator, accelerator.prepare(make_model())

    messages = []
    try:
        prepared(split_points=["layer.2"])
    except Exception as exc:  # noqa: BLE001 - the message is the outcome
        messages.append(f"{type(exc).__name__}: {exc}")
    accelerator, model = prepared(n_microbatches=4)
    x, y = make_data()[:6]
    for attempt in (lambda: model.step(x, target=y), lambda: model(x)):
        try:
            attempt()
        except Exception as exc:  # noqa: BLE001
            messages.append(f"{type(exc).__name__}: {exc}")
    try:
        accelerator.backward(nn.functional.mse_loss(torch.ones(2, requires_grad=True), torch.zeros(2)))
    except Exception as exc:  # noqa: BLE001
        messages.append(f"{type(exc).__name__}: {exc}")
    return messages


class ShortStream(IterableDataset):
    """n samples of make_data() as a stream, counting what this process iterated."""

    def __init__(self, n: int) -> None:
        self.n, self.read = n, 0

    def __iter__(self):
        data = make_data()
        for index in range(self.n):
            self.read += 1
            yield data[index]


def stream_edges(cases: list) -> list:
    """Streams at the V's PP=2 (rank 1 a middle stage) that end oddly: empty (stage 0 tells that no
    step comes), a short last batch, a last batch drop_last drops. Two epochs each:
    per epoch the steps taken, the end_of_dataloader flags, and the leading batch sizes seen."""
    from notebook_launcher import Accelerator, DataLoaderConfiguration, ParallelismConfig
    from notebook_launcher.utils import TorchPipelineParallelConfig

    out = []
    for n, batch, drop_last, dispatch in cases:
        pipeline = TorchPipelineParallelConfig(schedule="zbv_zero_bubble", loss_fn=nn.functional.mse_loss)
        accelerator = Accelerator(
            parallelism_config=ParallelismConfig(pp_size=2, pp_handler=pipeline),
            dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch),
        )
        stream = ShortStream(n)
        loader = accelerator.prepare(DataLoader(stream, batch_size=batch, drop_last=drop_last))
        epochs = []
        for _ in range(2):
            seen = [(len(x), loader.end_of_dataloader) for x, _ in loader]
            epochs.append(seen)
        out.append({"epochs": epochs, "read": stream.read, "position": loader.state_dict()["epoch"]})
    return out
