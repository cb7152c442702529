"""Forward only through stages placed on several ranks (model.eval_step for the multi-stage schedules).

torch's `schedule.eval()` of the multi-stage schedules (interleaved_1f1b, looped_bfs, the zero-bubble
ones) still runs the backward actions of their plan, which fail without a graph. Evaluation needs no
overlap, so this walks the stages in order, one micro-batch at a time: the rank holding stage s runs
it on the micro-batch (stage 0) or on what the rank of stage s - 1 sent, and sends the output on to
the rank of stage s + 1; the last stage computes the loss. Exactly one rank works at any moment, so
the blocking sends and receives always meet their partner (no deadlock, no overlap).

A stage's output is a tensor or a tuple/list of tensors; its shapes and dtypes travel first
(send_object_list), then the tensors (dist.send), so nothing about the model is assumed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ....errors import AcceleratorError


def forward_only_losses(
    stages: Mapping[int, nn.Module],
    stage_rank: Mapping[int, int],
    my_rank: int,
    inputs: Sequence[Any],
    target: Any,
    loss_fn: Callable[..., Any],
    n_microbatches: int,
    group: Any,
    device: torch.device,
) -> list[torch.Tensor]:
    """The loss of each micro-batch (on the rank of the last stage; [] elsewhere). `stages`: this
    rank's stage modules by stage index; `stage_rank`: every stage's rank in `group`."""
    n_stages = len(stage_rank)
    chunks = [torch.tensor_split(t, n_microbatches) if isinstance(t, torch.Tensor) else None for t in inputs]
    targets = torch.tensor_split(target, n_microbatches) if isinstance(target, torch.Tensor) else None
    losses: list[torch.Tensor] = []
    for mb in range(n_microbatches):
        carried: tuple[Any, ...] = ()
        for index in range(n_stages):
            if stage_rank[index] != my_rank:
                continue
            if index == 0:
                carried = tuple(c[mb] if c is not None else t for c, t in zip(chunks, inputs, strict=True))
            elif stage_rank[index - 1] != my_rank:
                carried = _receive(stage_rank[index - 1], group, device)
            output = stages[index](*carried)
            if index == n_stages - 1:
                assert targets is not None  # model._ready checked it on the last stage
                losses.append(loss_fn(output, targets[mb]).detach())
                continue
            carried = tuple(output) if isinstance(output, tuple | list) else (output,)
            if stage_rank[index + 1] != my_rank:
                _send(carried, stage_rank[index + 1], group, index)
    return losses


def _send(tensors: tuple[Any, ...], dst: int, group: Any, index: int) -> None:
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        kinds = ", ".join(type(t).__name__ for t in tensors)
        raise AcceleratorError(
            f"Pipeline stage {index} returned ({kinds}); a stage must return a tensor or a tuple of tensors "
            "to pass on to the next stage."
        )
    dist.send_object_list([[(tuple(t.shape), t.dtype) for t in tensors]], group=group, group_dst=dst)
    for t in tensors:
        dist.send(t.detach().contiguous(), group=group, group_dst=dst)


def _receive(src: int, group: Any, device: torch.device) -> tuple[torch.Tensor, ...]:
    meta: list[Any] = [None]
    dist.recv_object_list(meta, group=group, group_src=src)
    received = []
    for shape, dtype in meta[0]:
        t = torch.empty(shape, dtype=dtype, device=device)
        dist.recv(t, group=group, group_src=src)
        received.append(t)
    return tuple(received)
