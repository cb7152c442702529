"""Run one of Accelerate's own test scripts (from the installed package, unchanged) against
notebook_launcher: `python tests/run_accelerate_script.py test_notebook.py [--processes N] [--cpu]`.

The script's module is loaded (its `if __name__ == "__main__"` stays shut) and its main() called:
in this process, or with --processes N in each of N ranks of a notebook_launch. --cpu applies the
documented CPU adaptation of test_ddp_comm_hook.py (see cpu_adaptation).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accelerate_scripts import answer_accelerate_from_ours  # noqa: E402

SCRIPTS = Path(importlib.util.find_spec("accelerate").origin).parent / "test_utils" / "scripts"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"accelerate_script_{Path(name).stem}", SCRIPTS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def cpu_adaptation(module: ModuleType) -> Iterator[None]:
    """test_ddp_comm_hook.py on CPU: its reference DDP passes device_ids=[local rank], which torch's
    DDP refuses for a CPU module, so that DDP gets device_ids=None; and the bf16 cases are skipped,
    as torch's bf16 compression needs CUDA (our prepare refuses it on CPU with a clear error)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    class ReferenceDDP(DistributedDataParallel):
        def __init__(self, model, device_ids=None, output_device=None, **kwargs):
            on_cpu = all(p.device.type == "cpu" for p in model.parameters())
            super().__init__(
                model, None if on_cpu else device_ids, None if on_cpu else output_device, **kwargs
            )

    case = module.test_ddp_comm_hook
    bf16 = module.DDPCommunicationHookType.BF16

    def run_case(comm_hook, comm_wrapper, comm_state_option):
        if bf16 in (comm_hook, comm_wrapper) and not torch.cuda.is_available():
            print(f"Skipped on CPU (bf16 compression needs CUDA): {comm_hook}, {comm_wrapper}")
            return
        case(comm_hook, comm_wrapper, comm_state_option)
        print(f"Passed: {comm_hook}, {comm_wrapper}, {comm_state_option}")

    module.test_ddp_comm_hook = run_case
    torch.nn.parallel.DistributedDataParallel = ReferenceDDP
    try:
        yield
    finally:
        torch.nn.parallel.DistributedDataParallel = DistributedDataParallel
        module.test_ddp_comm_hook = case


def run_main(name: str, cpu: bool) -> None:
    answer_accelerate_from_ours()
    module = load(name)
    with cpu_adaptation(module) if cpu else contextlib.nullcontext():
        module.main()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("script")
    parser.add_argument("--processes", type=int, default=0)
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    if not args.processes:
        run_main(args.script, args.cpu)
        return
    from notebook_launcher import notebook_launch

    notebook_launch(run_main, args=(args.script, args.cpu), num_processes=args.processes, use_cpu=args.cpu)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
