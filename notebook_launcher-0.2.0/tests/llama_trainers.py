"""A tiny transformers Llama (built from a LlamaConfig in code, no downloads) for the tensor-parallel
routes of issue 27: the model's own plan applied by prepare(), and Accelerate's route, a model loaded
with `from_pretrained(..., tp_plan="auto", device_mesh=mesh["tp"])` from a folder saved first."""

from __future__ import annotations

import torch

VOCAB, SEQ = 64, 8


def llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
        attn_implementation="sdpa",
    )


def make_llama():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(llama_config()).float()


def save_llama(folder: str) -> None:
    make_llama().save_pretrained(folder)


def token_batches(batch: int, steps: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, VOCAB, (batch, SEQ), generator=g) for _ in range(steps)]


def train_llama(model, step, batches) -> list[float]:
    losses = []
    for ids in batches:
        loss = model(input_ids=ids, labels=ids).loss
        step(loss)
        losses.append(float(loss))
    return losses


def reference(folder: str | None, batch: int, steps: int) -> dict:
    """One process, whole model, the same batches."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder) if folder else make_llama()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(loss):
        loss.backward()
        opt.step()
        opt.zero_grad()

    losses = train_llama(model, step, token_batches(batch, steps))
    return {"losses": losses, "weights": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def train_tp(
    route: str, folder: str | None, batch: int, steps: int, tp_size: int = 2, dp_shard: int = 1
) -> dict:
    """route "own_plan": a plainly built model, split by prepare() with its own plan; route "auto":
    loaded already split (tp_plan="auto") on the mesh's "tp" dim."""
    from notebook_launcher import Accelerator, ParallelismConfig

    accelerator = Accelerator(parallelism_config=ParallelismConfig(tp_size=tp_size, dp_shard_size=dp_shard))
    if route == "auto":
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM.from_pretrained(
            folder, tp_plan="auto", device_mesh=accelerator.torch_device_mesh["tp"]
        )
    else:
        model = make_llama()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)

    def step(loss):
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()

    batches = token_batches(batch * dp_shard, steps)
    rank = accelerator.data_parallel_shard_rank
    mine = [ids[rank * batch : (rank + 1) * batch] for ids in batches]
    losses = train_llama(model, step, mine)
    return {"losses": losses, "weights": accelerator.get_state_dict(model)}
