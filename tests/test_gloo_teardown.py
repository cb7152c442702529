"""A notebook_launch worker never runs a gloo group's destructor while Python runs (issue 33).

Accelerate's test scripts end with `PartialState().destroy_process_group()` while their DDP models
are alive. The model's Reducer then holds the last reference to the gloo group, and frees it when
the function returns: ~ProcessGroupGloo joins the group's threads with the GIL held, and a thread
still finishing a collective waits for the GIL to free its tensors. One suite run hung so for good
in Accelerate's test_grad_sync (py-spy: std::thread::join under ~ProcessGroupGloo; the group's
runLoop thread in gil_scoped_acquire under ~AsyncAllgatherWork). The worker keeps what it destroys
referenced until its os._exit, so that destructor never runs: the group's threads are still there
after the model is gone. Without the fix they are joined (0 left) and the race can hang the rank.
"""

from __future__ import annotations

from notebook_launcher import notebook_launch


def _destroy_the_group_then_drop_the_model() -> int:
    import gc
    import os

    import torch

    from notebook_launcher import Accelerator, PartialState

    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(4, 4))
    accelerator.backward(model(torch.randn(2, 4)).sum())
    PartialState().destroy_process_group()  # as Accelerate's test scripts end, the DDP model alive
    del model, accelerator  # as the function's return frees them (the Accelerator keeps its models)
    gc.collect()  # the Reducer, the group's last holder but for the worker's keep
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:
            pass
    return names.count("pt_gloo_runloop")


def test_a_destroyed_group_held_by_a_ddp_model_is_not_torn_down_inside_the_worker():
    threads = notebook_launch(
        _destroy_the_group_then_drop_the_model, num_processes=2, quiet=True, timeout=120
    )
    assert all(count > 0 for count in threads), threads  # the group's threads were not joined
