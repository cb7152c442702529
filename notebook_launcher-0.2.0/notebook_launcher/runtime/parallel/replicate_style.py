"""The plan style "replicate": a module whose weights every tensor-parallel rank holds whole, as
Replicate DTensors on the tp mesh, so it composes with FSDP2 on the same 2-D mesh as the split layers."""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.tensor import DTensor, Replicate, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import ParallelStyle


class ReplicateParallel(ParallelStyle):
    """Parameters become Replicate DTensors; plain inputs enter as Replicate, outputs leave local."""

    def _apply(self, module: nn.Module, device_mesh: Any) -> nn.Module:
        def partition(name: str, sub: nn.Module, mesh: Any) -> None:
            for key, param in list(sub.named_parameters(recurse=False)):
                if not isinstance(param, DTensor):
                    full = distribute_tensor(param.data, mesh, [Replicate()])
                    sub.register_parameter(key, nn.Parameter(full, requires_grad=param.requires_grad))

        def inputs(mod: nn.Module, args: Any, mesh: Any) -> Any:
            return tuple(
                DTensor.from_local(a, mesh, [Replicate()], run_check=False) if _plain(a) else a for a in args
            )

        def outputs(mod: nn.Module, out: Any, mesh: Any) -> Any:
            return out.to_local() if isinstance(out, DTensor) else out

        return distribute_module(module, device_mesh, partition, inputs, outputs)


def _plain(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and not isinstance(value, DTensor)
