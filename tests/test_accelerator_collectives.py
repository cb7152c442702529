"""The Accelerator's process and collective API on 2 real processes (gloo), each call checked
against what Accelerate returns for it: split_between_processes, gather, gather_object, reduce,
broadcast, pad_across_processes, local_main_process_first, on_local_main_process, save, the
prepare_* calls one by one, no_sync, clip_grad_value_, step_scheduler_with_optimizer,
device_placement=False, free_memory, and the DDP / process-group kwargs handlers."""

import datetime
import os
import time

import pytest
import torch
from torch import nn

from notebook_launcher import WorkerError, notebook_launch


def api_tour(folder: str) -> dict:
    from notebook_launcher import Accelerator

    acc = Accelerator()
    rank = acc.process_index
    seen = {"local_index": acc.local_process_index, "is_local_main": acc.is_local_main_process}
    with acc.split_between_processes(list(range(5))) as part:
        seen["split"] = part
    with acc.split_between_processes(list(range(5)), apply_padding=True) as part:
        seen["split_padded"] = part
    seen["gather"] = acc.gather(torch.tensor([rank, 10 + rank])).tolist()
    seen["gather_object"] = acc.gather_object([f"from {rank}"])
    seen["reduce_sum"] = acc.reduce(torch.tensor([rank + 1.0]), "sum").item()
    seen["reduce_mean"] = acc.reduce(torch.tensor([rank + 1.0]), "mean").item()
    seen["broadcast"] = acc.broadcast(torch.tensor([100.0 + rank]), from_process=1).item()
    ragged = torch.full((rank + 1, 2), float(rank + 1))  # rank 0: 1 row, rank 1: 2 rows
    seen["padded"] = acc.pad_across_processes(ragged, dim=0, pad_index=-1).tolist()
    seen["padded_first"] = acc.pad_across_processes(ragged, dim=0, pad_index=-1, pad_first=True).tolist()

    order = os.path.join(folder, "order.txt")
    with acc.local_main_process_first():
        if rank != 0:
            seen["main_went_first"] = os.path.exists(order)
        with open(order, "a") as fp:
            fp.write(f"{rank}\n")
            fp.flush()
        if rank == 0:
            time.sleep(0.3)  # rank 1 must still be waiting
    acc.wait_for_everyone()

    calls = []
    acc.on_local_main_process(lambda: calls.append(rank))()
    seen["on_local_main_ran"] = calls
    acc.save({"rank": rank}, os.path.join(folder, "saved.pt"))  # only the main process writes
    acc.wait_for_everyone()
    seen["saved"] = torch.load(os.path.join(folder, "saved.pt"))["rank"]

    # prepare_* one at a time, a scheduler stepped with the optimizer (Accelerate: once per process)
    torch.manual_seed(0)
    model = acc.prepare_model(nn.Linear(4, 1))
    opt = acc.prepare_optimizer(torch.optim.SGD(model.parameters(), lr=1.0))
    sched = acc.prepare_scheduler(torch.optim.lr_scheduler.StepLR(opt.optimizer, step_size=1, gamma=0.5))
    loader = acc.prepare_data_loader(torch.utils.data.DataLoader(list(range(8)), batch_size=2))
    seen["batches"] = [b.tolist() for b in loader]
    x = torch.full((2, 4), float(rank + 1))
    with acc.no_sync(model):  # local gradients only
        acc.backward(model(x).sum())
    seen["grad_unsynced"] = model.module.weight.grad[0, 0].item() if hasattr(model, "module") else None
    opt.zero_grad()
    acc.backward(model(x).sum())  # synced: the mean over the processes
    seen["grad_synced"] = model.module.weight.grad[0, 0].item()
    acc.clip_grad_value_(model.parameters(), 1.25)
    seen["grad_clipped"] = model.module.weight.grad.abs().max().item()
    opt.step()
    sched.step()
    seen["lr_after_one_step"] = sched.get_last_lr()[0]
    seen["free_memory"] = acc.free_memory(model, opt)
    acc.end_training()
    return seen


def test_the_process_api_on_two_processes(tmp_path):
    result = notebook_launch(api_tour, args=(str(tmp_path),), num_processes=2, timeout=120, quiet=True)
    r0, r1 = result[0], result[1]
    assert (r0["local_index"], r1["local_index"]) == (0, 1) and (
        r0["is_local_main"],
        r1["is_local_main"],
    ) == (True, False)
    assert (r0["split"], r1["split"]) == ([0, 1, 2], [3, 4])
    assert (r0["split_padded"], r1["split_padded"]) == ([0, 1, 2], [3, 4, 4])
    assert r0["gather"] == r1["gather"] == [0, 10, 1, 11]
    assert r0["gather_object"] == r1["gather_object"] == ["from 0", "from 1"]
    assert r0["reduce_sum"] == r1["reduce_sum"] == 3.0
    assert r0["reduce_mean"] == r1["reduce_mean"] == 1.5
    assert r0["broadcast"] == r1["broadcast"] == 101.0
    assert r0["padded"] == [[1.0, 1.0], [-1.0, -1.0]] and r1["padded"] == [[2.0, 2.0], [2.0, 2.0]]
    assert r0["padded_first"] == [[-1.0, -1.0], [1.0, 1.0]]
    assert r1["main_went_first"] is True and (tmp_path / "order.txt").read_text() == "0\n1\n"
    assert (r0["on_local_main_ran"], r1["on_local_main_ran"]) == ([0], [])
    assert r0["saved"] == r1["saved"] == 0
    assert (r0["batches"], r1["batches"]) == ([[0, 1], [4, 5]], [[2, 3], [6, 7]])
    # d(sum of outputs)/dw = sum of inputs over the batch: 2 * (rank + 1) per element
    assert (r0["grad_unsynced"], r1["grad_unsynced"]) == (2.0, 4.0)
    assert r0["grad_synced"] == r1["grad_synced"] == 3.0
    assert r0["grad_clipped"] == r1["grad_clipped"] == 1.25
    assert r0["lr_after_one_step"] == 0.25  # stepped once per process, as in Accelerate
    assert r0["free_memory"] == [None, None]


def scheduler_without_optimizer_steps() -> float:
    from notebook_launcher import Accelerator

    acc = Accelerator(step_scheduler_with_optimizer=False)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model, opt, sched = acc.prepare(model, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5))
    acc.backward(model(torch.ones(1, 2)).sum())
    opt.step()
    sched.step()
    return sched.get_last_lr()[0]


def test_step_scheduler_with_optimizer_false_steps_once():
    assert list(notebook_launch(scheduler_without_optimizer_steps, num_processes=2, quiet=True)) == [0.5, 0.5]


def device_placement_off() -> tuple[str, str]:
    from notebook_launcher import Accelerator

    acc = Accelerator(device_placement=False)
    loader = acc.prepare(torch.utils.data.DataLoader(torch.arange(4.0), batch_size=2))
    batch = next(iter(loader))
    return str(acc.device), str(batch.device)


def test_device_placement_false_leaves_batches_where_they_are():
    assert notebook_launch(device_placement_off, num_processes=1, quiet=True)[0] == ("cpu", "cpu")


class PartlyUsed(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Linear(2, 1), nn.Linear(2, 1)

    def forward(self, x):
        return self.used(x)


def train_with_an_unused_layer(find_unused: bool) -> str:
    from notebook_launcher import Accelerator, DistributedDataParallelKwargs

    acc = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=find_unused)])
    model = PartlyUsed()
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(2):
        acc.backward(model(torch.ones(1, 2)).sum())
        opt.step()
        opt.zero_grad()
    return "trained"


def test_ddp_kwargs_reach_ddp():
    """An unused layer: DDP refuses the second backward unless find_unused_parameters=True."""
    assert list(notebook_launch(train_with_an_unused_layer, args=(True,), num_processes=2, quiet=True)) == [
        "trained",
        "trained",
    ]
    with pytest.raises(WorkerError, match="find_unused_parameters"):
        notebook_launch(train_with_an_unused_layer, args=(False,), num_processes=2, quiet=True, timeout=60)


def barrier_with_a_short_timeout() -> str:
    from notebook_launcher import Accelerator, InitProcessGroupKwargs

    acc = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=2))])
    if acc.process_index == 1:
        time.sleep(30)
    acc.wait_for_everyone()
    return "passed"


def barrier_at_once() -> str:
    from notebook_launcher import Accelerator

    Accelerator().wait_for_everyone()
    return "passed"


def test_the_process_group_timeout_from_kwargs_applies():
    began = time.monotonic()
    notebook_launch(barrier_at_once, num_processes=2, quiet=True)
    clean = time.monotonic() - began  # the floor: the same launch with a barrier that does not wait
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        notebook_launch(barrier_with_a_short_timeout, num_processes=2, quiet=True, timeout=60)
    elapsed = time.monotonic() - start
    # the 2 s timeout, not torch's default 30 min (nor rank 1's 30 s sleep: the barrier would then pass)
    assert info.value.rank == 0 and elapsed < 2 + 3 * clean + 2.0, (elapsed, clean)
