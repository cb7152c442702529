"""Single-process Accelerator behaviour: seed example, precision, bad input, no CUDA init (issue 2)."""

import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn, optim
from torch.utils.data import DataLoader, Dataset

from notebook_launcher import (
    Accelerator,
    AcceleratorError,
    ConfigError,
    GradScalerKwargs,
    notebook_launch,
    set_seed,
)
from notebook_launcher.runtime import reset_state


@pytest.fixture(autouse=True)
def fresh_state():
    reset_state()
    yield
    reset_state()


class DiyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 2)

    def forward(self, x):
        return self.fc(x)


class DiyDataset(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(1000, 10, generator=g)
        self.y = (self.x[:, 0] + 0.3 * torch.randn(1000, generator=g) > 0).long()

    def __len__(self):
        return 1000

    def __getitem__(self, idx):
        return self.x[idx], self.y[idx]


def seed_example(mixed_precision=None):
    """The seed example from issue 2, unchanged except for fixed data; returns per-epoch losses."""
    set_seed(0)
    accelerator = Accelerator(mixed_precision=mixed_precision)
    model = DiyModel()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=1e-2)
    dataloader = DataLoader(DiyDataset(), batch_size=32, shuffle=True)
    model, optimizer, dataloader, criterion = accelerator.prepare(model, optimizer, dataloader, criterion)
    model.train()
    losses = []
    for epoch in range(3):
        total_loss = 0.0
        for x, y in dataloader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            total_loss += loss.item()
        print(f"Epoch {epoch + 1}, Loss: {total_loss / len(dataloader):.4f}")
        losses.append(total_loss / len(dataloader))
    accelerator.end_training()
    return losses


def test_seed_example_trains_on_one_process():
    losses = seed_example()
    assert losses[-1] < losses[0] < 0.8


def test_seed_example_trains_on_two_processes():
    result = notebook_launch(seed_example, num_processes=2, quiet=True, timeout=120)
    assert all(r[-1] < r[0] for r in result)
    assert "Epoch 3, Loss:" in result.logs[0] and "Epoch 3, Loss:" in result.logs[1]


UNIT_ROUNDOFF = {"fp16": 2.0**-11, "bf16": 2.0**-8}  # half the spacing at 1: a property of the format


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_on_cpu_trains_close_to_fp32(precision):
    fp32 = seed_example()
    mixed = seed_example(precision)
    # A linear classifier with cross-entropy is a convex problem: it does not amplify rounding, so
    # each epoch's loss stays within one unit roundoff of the low precision (relative) of fp32's,
    # whatever the CPU's kernels (measured 0.04 u for bf16, 0.005 u for fp16). Gradients left
    # scaled, or an fp16 overflow stepped anyway, would be off by far more.
    u = UNIT_ROUNDOFF[precision]
    for got, want in zip(mixed, fp32, strict=True):
        assert abs(got - want) <= u * want, (fp32, mixed)
    assert mixed != fp32  # and the low precision really ran


def test_outputs_come_back_in_fp32_under_bf16():
    acc = Accelerator(mixed_precision="bf16")
    model = acc.prepare(nn.Linear(4, 4))
    assert model(torch.randn(2, 4)).dtype == torch.float32
    with acc.autocast():
        assert torch.nn.functional.linear(torch.randn(2, 4), torch.randn(4, 4)).dtype == torch.bfloat16


@pytest.mark.parametrize(
    "precision, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16), ("no", torch.float32)]
)
def test_the_prepared_model_really_computes_in_the_chosen_precision(precision, dtype):
    acc = Accelerator(mixed_precision=precision)
    inner = nn.Linear(4, 4)
    seen = []
    inner.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    model = acc.prepare(nn.Sequential(inner, nn.ReLU(), nn.Linear(4, 1)))
    out = model(torch.randn(8, 4))
    assert seen == [dtype]  # the layer ran in fp16 / bf16 (autocast), not in fp32
    assert out.dtype == torch.float32  # and the output is handed back in fp32, as in Accelerate


def test_fp16_scales_the_loss_before_backward():
    torch.manual_seed(0)
    reference = nn.Linear(4, 1)
    x = torch.randn(8, 4)
    reference(x).mean().backward()
    acc = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024)])
    model = nn.Linear(4, 1)
    model.load_state_dict(reference.state_dict())
    model, opt = acc.prepare(model, optim.SGD(model.parameters(), lr=0.1))
    acc.backward(model(x).mean())
    # gradients are 1024x the true ones until the optimizer step unscales them. In fp16 each weight's
    # gradient is a sum of 8 terms 1024/8 * x rounded to fp16: off by at most (8 + 1) unit roundoffs
    # of the sum of the terms' sizes, on any CPU (the bound of the format, not a measured figure).
    terms = (1024 / 8) * x.abs().sum(dim=0, keepdim=True)
    error = (model.weight.grad - 1024 * reference.weight.grad).abs()
    assert (error <= 9 * UNIT_ROUNDOFF["fp16"] * terms).all(), (
        model.weight.grad,
        1024 * reference.weight.grad,
    )


def test_fp16_overflow_skips_the_step_and_the_scheduler():
    acc = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024)])
    model = nn.Linear(4, 1)
    opt = optim.SGD(model.parameters(), lr=0.1)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    model, opt, sched = acc.prepare(model, opt, sched)
    before = model.weight.detach().clone()
    loss = model(torch.randn(8, 4)).sum() * float("inf")
    acc.backward(loss)
    opt.step()
    sched.step()
    assert acc.optimizer_step_was_skipped
    assert torch.equal(model.weight.detach(), before)
    assert sched.get_last_lr() == [0.1]
    opt.zero_grad()
    acc.backward(model(torch.randn(8, 4)).mean())
    opt.step()
    sched.step()
    assert acc.scaler.get_scale() == 512.0  # backed off once
    assert not acc.optimizer_step_was_skipped
    assert not torch.equal(model.weight.detach(), before)
    assert sched.get_last_lr() == [0.05]


def test_the_fp16_loss_scale_survives_save_state_and_load_state(tmp_path):
    def fp16_run():
        acc = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024)])
        model = nn.Linear(4, 1)
        model, opt = acc.prepare(model, optim.SGD(model.parameters(), lr=0.1))
        return acc, model, opt

    acc, model, opt = fp16_run()
    acc.backward(model(torch.randn(8, 4)).sum() * float("inf"))
    opt.step()  # overflow: skipped, scale backed off
    assert acc.scaler.get_scale() == 512.0
    acc.save_state(str(tmp_path / "ckpt"))
    reset_state()
    acc, model, opt = fp16_run()
    assert acc.scaler.get_scale() == 1024.0
    acc.load_state(str(tmp_path / "ckpt"))
    assert acc.scaler.get_scale() == 512.0  # resumed with the scale it had, not from scratch


def test_clip_grad_norm_unscales_first():
    acc = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=256)])
    model = nn.Linear(4, 1)
    model, opt = acc.prepare(model, optim.SGD(model.parameters(), lr=0.1))
    acc.backward(model(torch.ones(2, 4)).sum())
    norm = acc.clip_grad_norm_(model.parameters(), max_norm=1e9)
    # d(sum(Wx+b))/dW = 2 per weight, /db = 2: true norm is 2*sqrt(5), not scaled by 256. The
    # gradients are small integers, exact in fp16 and after unscaling, so only the fp32 norm rounds:
    # a few float32 epsilons on any CPU.
    assert abs(float(norm) - 2 * 5**0.5) <= 4 * torch.finfo(torch.float32).eps * 2 * 5**0.5


def test_gradient_accumulation_skips_steps_until_sync():
    acc = Accelerator(gradient_accumulation_steps=2)
    model = nn.Linear(2, 1)
    model, opt = acc.prepare(model, optim.SGD(model.parameters(), lr=0.1))
    start = model.weight.detach().clone()
    syncs = []
    for _ in range(4):
        with acc.accumulate(model):
            acc.backward(model(torch.ones(1, 2)).sum())
            opt.step()
            opt.zero_grad()
            syncs.append(acc.sync_gradients)
            if not acc.sync_gradients:
                assert torch.equal(model.weight.detach(), start)
        start = model.weight.detach().clone() if acc.sync_gradients else start
    assert syncs == [False, True, False, True]


def test_process_helpers_in_a_single_process():
    acc = Accelerator()
    assert (acc.process_index, acc.num_processes, acc.is_main_process, acc.is_last_process) == (
        0,
        1,
        True,
        True,
    )
    assert acc.distributed_type == "NO"
    assert acc.gather(torch.tensor(3.0)).tolist() == [3.0]
    assert acc.reduce(torch.tensor([2.0])).tolist() == [2.0]
    assert acc.gather_object(["a"]) == ["a"]
    with acc.split_between_processes([1, 2, 3]) as part:
        assert part == [1, 2, 3]
    with acc.main_process_first():
        pass
    assert acc.on_main_process(lambda: 5)() == 5


def test_save_model_writes_unwrapped_weights(tmp_path):
    from safetensors.torch import load_file

    acc = Accelerator()
    model = acc.prepare(nn.Linear(3, 2))
    acc.save_model(model, tmp_path / "out")
    state = load_file(tmp_path / "out" / "model.safetensors")
    assert set(state) == {"weight", "bias"} and torch.equal(state["weight"], model.weight.detach())


@pytest.mark.parametrize(
    "make, error, text",
    [
        (lambda: Accelerator(mixed_precision="fp7"), ConfigError, "mixed_precision='fp7'"),
        (lambda: Accelerator(gradient_accumulation_steps=0), ConfigError, "gradient_accumulation_steps=0"),
        (lambda: Accelerator(mixed_precision="fp8"), Exception, "compute capability 8.9"),
        (lambda: Accelerator(log_with="wandbb"), ConfigError, "log_with='wandbb' is not a tracker"),
    ],
)
def test_bad_constructor_arguments_name_the_value(make, error, text):
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_preparing_the_same_model_twice_is_an_error():
    acc = Accelerator()
    model = nn.Linear(2, 2)
    acc.prepare(model)
    with pytest.raises(AcceleratorError, match="already prepared"):
        acc.prepare(model)


def test_backward_before_prepare_is_an_error():
    acc = Accelerator()
    with pytest.raises(AcceleratorError, match="before any model was prepared"):
        acc.backward(nn.Linear(2, 1)(torch.ones(1, 2)).sum())


def test_import_and_hardware_detection_do_not_initialise_cuda():
    code = textwrap.dedent(
        """
        import torch, notebook_launcher
        from notebook_launcher import LaunchConfig
        from notebook_launcher.system import hardware
        info = hardware.detect()
        notebook_launcher.Accelerator  # the lazy import of the runtime
        assert not torch.cuda.is_initialized(), "CUDA was initialised"
        print("cpus", info.cpu_count, "gpus", info.cuda_device_count)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "cpus" in out.stdout
