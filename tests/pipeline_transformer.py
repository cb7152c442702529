"""A tiny causal attention transformer (scaled_dot_product_attention) in torchtitan's shape (not an nn.Sequential: `embed`, a
ModuleList `layers`, `norm`, `head`, declared in another order than they run), trained as a pipeline
and in one plain process on the same batches (the reference, and the same nudged by one ulp per step
for the noise floor, tests/noise_floor.py)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainers import nudge_weights

VOCAB, WIDTH, HEADS, SEQ = 16, 16, 2, 8


class Embed(nn.Module):
    """Tokens and learned positions (one module, so the model's forward stays a chain)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Parameter(torch.randn(SEQ, WIDTH) * 0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tokens(ids) + self.positions[: ids.shape[1]]


class Attention(nn.Module):
    """Causal multi-head self-attention (scaled_dot_product_attention). The heads are read from the
    projection's width, so a tensor-parallel rank (q/k/v split by columns) runs its share of them."""

    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.o_proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (
            p(x).view(b, n, -1, WIDTH // HEADS).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class Block(nn.Module):
    """Pre-norm causal self-attention and an MLP, each with its residual."""

    def __init__(self) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(WIDTH)
        self.attn = Attention()
        self.mlp_norm = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.attn(self.attn_norm(h))
        return h + self.down(nn.functional.gelu(self.up(self.mlp_norm(h))))


TP_PLAN = {
    **{f"layers.*.attn.{p}_proj": "colwise" for p in "qkv"},
    "layers.*.attn.o_proj": "rowwise",
    "layers.*.up": "colwise",
    "layers.*.down": "rowwise",
}


class TinyTransformer(nn.Module):
    def __init__(self, layers: int = 4) -> None:
        super().__init__()
        self.head = nn.Linear(WIDTH, VOCAB)  # declared first, runs last: the cut follows the forward
        self.embed = Embed()
        self.layers = nn.ModuleList(Block() for _ in range(layers))
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


def make_transformer() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer()


def make_tokens(n: int = 64) -> TensorDataset:
    """Sequences whose next token is the current one + 1 (mod VOCAB): learnable in a few steps."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    return TensorDataset(ids, (ids + 1) % VOCAB)


def token_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())


def transformer_reference(batch: int, steps: int, *, nudge: bool = False) -> dict:
    model = make_transformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for i, (x, y) in enumerate(DataLoader(make_tokens(), batch_size=batch)):
        if i >= steps:
            break
        if nudge:
            nudge_weights(model.parameters(), i)
        loss = token_loss(model(x), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    return {"weights": {k: v.detach().clone() for k, v in model.state_dict().items()}, "losses": losses}


def train_transformer(
    schedule: str, batch: int, steps: int, n_microbatches: int, sizes: dict | None = None
) -> dict:
    """Train the tiny transformer on a mesh (pp_size=2 unless `sizes` says more); rank 0 returns the
    full weights."""
    from notebook_launcher import Accelerator, ParallelismConfig
    from notebook_launcher.utils import TorchPipelineParallelConfig, TorchTensorParallelConfig

    sizes = sizes or {"pp_size": 2}
    pipeline = TorchPipelineParallelConfig(
        schedule=schedule, n_microbatches=n_microbatches, loss_fn=token_loss
    )
    tp = TorchTensorParallelConfig(plan=TP_PLAN) if sizes.get("tp_size", 1) > 1 else None
    accelerator = Accelerator(
        parallelism_config=ParallelismConfig(**sizes, pp_handler=pipeline, tp_handler=tp)
    )
    model = make_transformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt, loader = accelerator.prepare(model, opt, DataLoader(make_tokens(), batch_size=batch))
    losses = []
    for i, (x, y) in enumerate(loader):
        if i >= steps:
            break
        losses.append(model.step(x, target=y).item())
        opt.step()
        opt.zero_grad()
    state = accelerator.get_state_dict(model)
    return {
        "weights": {k: v.detach().cpu().clone() for k, v in state.items()},
        "losses": losses,
        "stages": list(model.stage_ids),
        "local_keys": sorted(model.state_dict()),
        "mesh_dims": accelerator.torch_device_mesh.mesh_dim_names,
        "q_proj_rows": {  # this rank's rows of each q projection it holds (TP and FSDP2 pieces)
            k: getattr(v, "_local_tensor", v).shape[0]
            for k, v in model.state_dict().items()
            if k.endswith("q_proj.weight")
        },
    }


def transformer_cases(items: list) -> list:
    return [train_transformer(*args) for args in items]
