"""Training functions for the model-parallel tests (issue 27): a tiny transformer-like net whose
attention and MLP projections are split by a plan, trained through the Accelerator on a mesh or in
one plain process on the same global batches."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FEATURES, WIDTH, HIDDEN, SEQ = 8, 16, 32, 4
PLAN = {
    "layers.*.attn.q_proj": "colwise",
    "layers.*.attn.o_proj": "rowwise",
    "layers.*.mlp.up_proj": "colwise",
    "layers.*.mlp.down_proj": "rowwise",
}


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(WIDTH, WIDTH)
        self.o_proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o_proj(torch.tanh(self.q_proj(x)))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up_proj = nn.Linear(WIDTH, HIDDEN)
        self.down_proj = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.nn.functional.gelu(self.up_proj(x)))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.attn = Attn()
        self.mlp = Mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm(x))
        return x + self.mlp(x)


class TinyNet(nn.Module):
    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, WIDTH)
        self.layers = nn.ModuleList(Block() for _ in range(blocks))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def make_model() -> TinyNet:
    torch.manual_seed(0)
    return TinyNet()


def make_data(n: int = 32) -> TensorDataset:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, SEQ, FEATURES, generator=g)
    y = x.sum(dim=-1, keepdim=True).tanh()
    return TensorDataset(x, y)


def reference(global_batch: int, steps: int, accumulate: int = 1, clip: float | None = None) -> dict:
    """One process, the same global batches: the weights every mesh must end with."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(make_data(), batch_size=global_batch)
    for i, (x, y) in enumerate(loader):
        if i >= steps * accumulate:
            break
        loss = nn.functional.mse_loss(model(x), y) / accumulate
        loss.backward()
        if (i + 1) % accumulate == 0:
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_on_mesh(
    sizes: dict,
    batch: int,
    steps: int,
    *,
    accumulate: int = 1,
    clip: float | None = None,
    route: str = "plan",
    fsdp_plugin: bool = False,
    mixed_precision: str = "no",
) -> dict:
    """Train on a ParallelismConfig mesh; returns rank-local facts and (rank 0) the full weights."""
    from notebook_launcher import Accelerator, ParallelismConfig
    from notebook_launcher.utils import FullyShardedDataParallelPlugin, TorchTensorParallelConfig

    handler = None
    if sizes.get("tp_size", 1) > 1:
        if route == "plan":
            handler = TorchTensorParallelConfig(plan=PLAN)
        elif route == "replicate":  # the norms and the head whole on every tp rank, as Replicate DTensors
            handler = TorchTensorParallelConfig(
                plan={**PLAN, "layers.*.norm": "replicate", "head": "replicate"}
            )
        else:
            handler = TorchTensorParallelConfig(parallelize_fn=_parallelize_by_hand)
    pc = ParallelismConfig(**sizes, tp_handler=handler)
    accelerator = Accelerator(
        parallelism_config=pc,
        gradient_accumulation_steps=accumulate,
        mixed_precision=mixed_precision,
        fsdp_plugin=FullyShardedDataParallelPlugin() if fsdp_plugin else None,
    )
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(make_data(), batch_size=batch)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    seen, norms = [], []
    for i, (x, y) in enumerate(loader):
        if i >= steps * accumulate:
            break
        seen.append(x[:, 0, 0].tolist())
        with accelerator.accumulate(model):
            loss = nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            if clip is not None and accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), clip)))
            opt.step()
            opt.zero_grad()
    state = accelerator.get_state_dict(model)
    gathered = accelerator.gather_for_metrics(torch.arange(batch) + 100 * accelerator.process_index)
    mesh = accelerator.torch_device_mesh
    return {
        "weights": {k: v.detach().cpu().clone() for k, v in state.items()},
        "seen": seen,
        "norms": norms,
        "mesh_dims": mesh.mesh_dim_names if mesh is not None else None,
        "ranks": (
            accelerator.data_parallel_rank,
            accelerator.data_parallel_shard_rank,
            accelerator.tensor_parallel_rank,
        ),
        "gathered": len(gathered),
        "distributed_type": str(accelerator.distributed_type),
    }


def _parallelize_by_hand(model: nn.Module, mesh) -> nn.Module:
    """The parallelize_fn escape hatch: the same split, written with torch's own API."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    for layer in model.layers:
        parallelize_module(
            layer,
            mesh["tp"],
            {
                "attn.q_proj": ColwiseParallel(),
                "attn.o_proj": RowwiseParallel(),
                "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel(),
            },
        )
    return model


def compositions(cases: list) -> list:
    """Several meshes one after another in the same processes (one launch for the lot)."""
    return [train_on_mesh(*args, **kwargs) for args, kwargs in cases]


def save_and_resume(
    sizes: dict, batch: int, folder: str, sharded: bool = False, async_save: bool = False
) -> dict:
    """Train 2 steps, save_state, train 2 more; a fresh model and optimizer load_state and train the
    same 2: both must end equal. save_model's safetensors must hold the full weights.
    async_save: the save is written in the background, its writer held until the 2 more steps are
    done (a save that did not stage its own copy would write the later weights)."""
    import threading

    from notebook_launcher import Accelerator, ParallelismConfig
    from notebook_launcher.runtime.checkpointing import async_save as saving
    from notebook_launcher.utils import FullyShardedDataParallelPlugin, TorchTensorParallelConfig

    def setup():
        handler = TorchTensorParallelConfig(plan=PLAN) if sizes.get("tp_size", 1) > 1 else None
        plugin = FullyShardedDataParallelPlugin(state_dict_type="SHARDED_STATE_DICT") if sharded else None
        accelerator = Accelerator(
            parallelism_config=ParallelismConfig(**sizes, tp_handler=handler), fsdp_plugin=plugin
        )
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        loader = DataLoader(make_data(), batch_size=batch)
        return accelerator, *accelerator.prepare(model, opt, loader)

    def steps(accelerator, model, opt, batches):
        for x, y in batches:
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()

    accelerator, model, opt, loader = setup()
    batches = list(loader)
    steps(accelerator, model, opt, batches[:2])
    trained = threading.Event()
    if async_save:
        saving.saver().before_write = lambda index, path: trained.wait()
    accelerator.save_state(f"{folder}/ckpt", async_save=async_save)
    steps(accelerator, model, opt, batches[2:4])
    trained.set()
    straight = accelerator.get_state_dict(model)
    accelerator.save_model(model, f"{folder}/model")
    accelerator.wait_for_everyone()
    accelerator2, model2, opt2, _ = setup()
    accelerator2.load_state(f"{folder}/ckpt")
    steps(accelerator2, model2, opt2, batches[2:4])
    resumed = accelerator2.get_state_dict(model2)
    return {"straight": straight, "resumed": resumed}
