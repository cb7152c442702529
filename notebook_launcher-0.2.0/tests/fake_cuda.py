"""Stand-ins for CUDA tensors on a machine without a GPU, to test the paths that move them.

A FakeCuda tensor holds its data on the CPU but reports `device == cuda:0`, which is all the
launcher looks at to decide that a tensor must be moved; operations on it give plain tensors
(torch function dispatch is off, as for nn.Parameter). Importable, so a kernel or a spawned worker
that receives one unconverted rebuilds a FakeCuda, and a test can see that it was not converted.
"""

import torch

CUDA0 = torch.device("cuda", 0)


class FakeCuda(torch.Tensor):
    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self) -> torch.device:
        return CUDA0


class FakeCudaParameter(torch.nn.Parameter):
    @property
    def device(self) -> torch.device:
        return CUDA0


def fake_cuda(tensor: torch.Tensor) -> FakeCuda:
    return tensor.as_subclass(FakeCuda)


def fake_cuda_module(module: torch.nn.Module) -> torch.nn.Module:
    """The module with every parameter replaced by a FakeCudaParameter (same values)."""
    for sub in module.modules():
        for name, param in list(sub.named_parameters(recurse=False)):
            setattr(sub, name, FakeCudaParameter(param.detach().clone(), requires_grad=param.requires_grad))
    return module


def describe(value) -> str:
    """'Tensor cpu' / 'FakeCuda cuda' / 'Parameter cpu': what a receiver got."""
    return f"{type(value).__name__} {value.device.type}"
