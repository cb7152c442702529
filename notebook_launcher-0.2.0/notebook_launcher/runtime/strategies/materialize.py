"""Where a model's weights come from when it was built (partly) on the meta device — for every
strategy: which source to use, and the pieces that fill empty tensors from it.

`weights_source` asks every rank (one small collective) and decides:

- "local":  no rank holds meta tensors: each rank's own weights (DDP and FSDP broadcast rank 0's);
- "rank0":  rank 0 holds real weights, another rank does not (`accelerator.sharded_init()`, or
            Accelerate's `fsdp_cpu_ram_efficient_loading`): rank 0's values are sent into the
            other ranks' empty tensors (FSDP: each rank receives only its shard);
- "none":   rank 0 holds meta tensors too: nobody has the weights, so each module's own
            `reset_parameters()` initialises them (in post-order, as construction does), or a
            checkpoint is loaded afterwards (`accelerator.load_state`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn

from ..big_modeling import has_meta_tensors

LOCAL, RANK0, NONE = "local", "rank0", "none"


def weights_source(model: nn.Module, device: torch.device, rank0_requested: bool = False) -> str:
    """LOCAL, RANK0 or NONE (see the module docstring); a collective when there are several ranks.

    rank0_requested (fsdp_cpu_ram_efficient_loading): use rank 0's weights even when every rank
    built a real copy, so the others' copies are dropped before sharding, as Accelerate does."""
    meta_here = has_meta_tensors(model)
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return NONE if meta_here else LOCAL
    flags = torch.tensor([int(meta_here)], device=device)
    gathered = [torch.zeros_like(flags) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flags)
    meta = [bool(t.item()) for t in gathered]
    if meta[0]:
        return NONE
    if any(meta) or rank0_requested:
        return RANK0
    return LOCAL


def parameters_to_meta(model: nn.Module) -> None:
    """Replace every parameter by an empty one on the meta device (tied parameters stay tied), and
    release the old ones' memory (see release_storage)."""
    replaced: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None:
                continue
            if id(param) not in replaced:
                empty = torch.empty_like(param, device="meta")
                replaced[id(param)] = nn.Parameter(empty, requires_grad=param.requires_grad)
                release_storage(param)
            module._parameters[name] = replaced[id(param)]


def release_storage(param: torch.Tensor) -> None:
    """Let a replaced parameter's memory go now. A tensor cannot change device under the same
    object, so sharding makes new Parameter objects; the old ones live on in an optimizer created
    before prepare (until it is re-bound) and would keep a full copy of the model alive meanwhile.
    Whoever still needs the values holds another reference to them (a detached view)."""
    if not param.is_meta:
        with torch.no_grad():
            param.data = torch.empty(0, dtype=param.dtype, device=param.device)


def materialized_parameters(
    model: nn.Module,
    device: torch.device,
    dtype: torch.dtype | None = None,
    replaced: dict[int, nn.Parameter] | None = None,
) -> Iterator[nn.Parameter]:
    """Every parameter once, in `model.parameters()` order; a meta one is first replaced (in all
    modules that share it) by an uninitialised one on `device`, just before it is yielded. With
    `dtype`, floating-point parameters are also converted to it. `replaced` collects
    {id(old parameter): new parameter} for re-binding an optimizer created before."""
    done: dict[int, nn.Parameter] = {} if replaced is None else replaced
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None:
                continue
            if id(param) in done:
                module._parameters[name] = done[id(param)]
                continue
            wanted = dtype if dtype is not None and param.is_floating_point() else param.dtype
            new = param
            if param.is_meta:
                empty = torch.empty(param.shape, dtype=wanted, device=device)
                new = nn.Parameter(empty, requires_grad=param.requires_grad)
            elif param.dtype != wanted:
                with torch.no_grad():
                    param.data = param.data.to(wanted)
            done[id(param)] = new
            module._parameters[name] = new
            yield new


def rebind_optimizer(optimizer: torch.optim.Optimizer | None, replaced: dict[int, nn.Parameter]) -> None:
    """Point an optimizer created before prepare() at the parameters that replaced its own."""
    if optimizer is None or not replaced:
        return
    for group in optimizer.param_groups:
        group["params"] = [replaced.get(id(p), p) for p in group["params"]]


def real_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """The buffers that hold values (not meta), by name, so they survive `to_empty`."""
    return {name: b.detach().clone() for name, b in model.named_buffers() if not b.is_meta}


def restore_buffers(model: nn.Module, saved: dict[str, torch.Tensor]) -> list[str]:
    """Copy saved buffer values back; returns the names of buffers that had none (born on meta)."""
    empty = []
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name in saved:
                buffer.copy_(saved[name].to(buffer.device))
            else:
                buffer.zero_()
                empty.append(name)
    return empty


def materialize_buffers(model: nn.Module, device: torch.device) -> list[str]:
    """Zero-filled memory for buffers built on the meta device; returns their names."""
    names = []
    for module_name, module in model.named_modules():
        for name, buffer in list(module._buffers.items()):
            if buffer is not None and buffer.is_meta:
                module._buffers[name] = torch.zeros_like(buffer, device=device)
                names.append(f"{module_name}.{name}" if module_name else name)
    return names


def materialize_whole(
    model: nn.Module, device: torch.device, replaced: dict[int, nn.Parameter]
) -> str | None:
    """For strategies that keep a whole copy per rank: give a (partly) meta-device model real
    tensors on `device`, with rank 0's values where rank 0 has them, else `reset_parameters()`.
    `replaced` collects the parameters that were swapped (to re-bind an optimizer). Returns a note
    when some tensors could not be initialised."""
    source = weights_source(model, device)
    if source == LOCAL:
        return None
    owners = meta_parameter_owners(model) if source == NONE else set()
    for _ in materialized_parameters(model, device, replaced=replaced):
        pass
    meta_born = materialize_buffers(model, device)
    without = reset_modules(model, owners)
    if dist.is_initialized() and dist.get_world_size() > 1:
        with torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                dist.broadcast(tensor.data, src=0)
    return describe_uninitialised(without, meta_born if source == NONE else [])


def broadcast_buffers(model: nn.Module) -> None:
    """Every rank takes rank 0's buffers (they are replicated, never sharded)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    with torch.no_grad():
        for buffer in model.buffers():
            dist.broadcast(buffer.data, src=0)


def post_order(module: nn.Module) -> Iterator[nn.Module]:
    """Children before their parent: the order in which construction finishes initialising them."""
    for child in module.children():
        yield from post_order(child)
    yield module


def meta_parameter_owners(model: nn.Module) -> set[int]:
    """ids of the modules that own (directly) at least one meta parameter."""
    return {id(m) for m in model.modules() if any(p.is_meta for p in m.parameters(recurse=False))}


def reset_modules(model: nn.Module, owners: set[int]) -> list[str]:
    """Run each owner's `reset_parameters()` (or `_reset_parameters()`), children first, as its
    constructor would; zero the parameters of owners without one and return their names."""
    names = {id(m): name for name, m in model.named_modules()}
    without = []
    with torch.no_grad():
        for module in post_order(model):
            if id(module) not in owners:
                continue
            reset = getattr(module, "reset_parameters", None) or getattr(module, "_reset_parameters", None)
            if callable(reset):
                reset()
                continue
            for pname, param in module.named_parameters(recurse=False):
                param.zero_()
                without.append(f"{names[id(module)] or type(module).__name__}.{pname}")
    return without


def describe_uninitialised(names: list[str], buffers: list[str]) -> str | None:
    """The note printed when some tensors could not be initialised (None when all were)."""
    parts = []
    if names:
        parts.append(
            f"parameters {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} belong to modules without "
            "reset_parameters() and start at zero"
        )
    if buffers:
        parts.append(
            f"buffers {', '.join(buffers[:5])}{' ...' if len(buffers) > 5 else ''} were created on the meta "
            "device and start at zero"
        )
    if not parts:
        return None
    return (
        "The model was built on the meta device on every rank, so nothing holds its weights: "
        + "; ".join(parts)
        + ". Load weights with accelerator.load_state(folder), or build the model inside "
        "accelerator.sharded_init() so rank 0's real copy is used."
    )
