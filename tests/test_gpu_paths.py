"""GPU paths, tested on CPU through their mechanism (benchmarks/gpu_check.py runs them on a real GPU).

- tensors coming back to the kernel (return values, metrics) are moved to the CPU in the worker;
- under spawn, GPU tensors sent to the workers travel on the CPU, with a note naming where they were;
- a kernel whose CUDA *driver* was initialised (torch.cuda.is_initialized() still False) is not
  forked; a worker forked anyway says why and how to fix, instead of training silently on the CPU;
- gpu_ids sets the default process count; MULTI_CPU / use_cpu stay on the CPU on a GPU machine.

A "GPU tensor" here is tests/fake_cuda.py's FakeCuda: CPU data that reports device cuda:0. A "GPU
machine" is torch.cuda patched in the test process before the workers are forked from it.
"""

import pickle
import shutil
import subprocess
import sys

import pytest
import torch
from fake_cuda import describe, fake_cuda, fake_cuda_module

from notebook_launcher import WorkerError, notebook_launch
from notebook_launcher.config import LaunchConfig
from notebook_launcher.errors import ConfigError
from notebook_launcher.launch.supervise.payload import pickle_target
from notebook_launcher.resolution import resolve_launch
from notebook_launcher.resolution.processes import check_gpu_ids, count_processes, single_process_rule
from notebook_launcher.resolution.start_method import choose_start_method
from notebook_launcher.system.hardware import GPUInfo, HardwareInfo, loaded_libcuda


# ------------------------------------------------------------- worker -> kernel: on the CPU
def return_gpu_tensors():
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    accelerator.log({"vector": fake_cuda(torch.arange(3.0))}, step=0)
    model = fake_cuda_module(torch.nn.Linear(2, 2))
    return {"tensor": fake_cuda(torch.arange(4.0)), "model": model, "sent": describe(model.weight)}


def test_tensors_come_back_to_the_kernel_on_the_cpu():
    result = notebook_launch(return_gpu_tensors, num_processes=1, quiet=True, timeout=60)
    value = result[0]
    assert value["sent"] == "FakeCudaParameter cuda"  # the worker really held "GPU" tensors
    assert describe(value["tensor"]) == "Tensor cpu"  # converted in the worker, not rebuilt here
    assert torch.equal(value["tensor"], torch.arange(4.0))
    assert describe(value["model"].weight) == "Parameter cpu" and value["model"].weight.requires_grad
    assert describe(result.metrics[0]["vector"]) == "Tensor cpu"
    assert torch.equal(result.metrics[0]["vector"], torch.arange(3.0))


# ------------------------------------------------------------------ kernel -> spawned worker
def describe_inputs(x, model=None):
    return describe(x), describe(model.weight) if model is not None else None, float(x.sum())


def test_spawn_sends_gpu_tensors_on_the_cpu(capsys):
    result = notebook_launch(
        describe_inputs,
        args=(fake_cuda(torch.ones(3)),),
        kwargs={"model": fake_cuda_module(torch.nn.Linear(2, 2))},
        num_processes=1,
        start_method="spawn",
        timeout=120,
    )
    assert result[0] == ("Tensor cpu", "Parameter cpu", 3.0)  # not restored onto cuda:0
    out = capsys.readouterr().out
    assert "3 CUDA tensors" in out and "args[0] and kwargs['model']" in out and "on the CPU" in out


def test_the_spawn_note_names_a_captured_variable():
    captured = fake_cuda(torch.zeros(2))

    def uses_it():
        return captured.sum()

    notes = []
    payload = pickle_target(uses_it, (), {}, notes.append)
    fn, _, _ = pickle.loads(payload)
    assert describe(fn.__closure__[0].cell_contents) == "Tensor cpu"
    assert notes and "the variable 'captured' that uses_it uses" in notes[0]
    quiet = []
    pickle_target(describe_inputs, (torch.ones(1),), {}, quiet.append)
    assert quiet == []  # CPU tensors: nothing to say


# ------------------------------------------------------- the CUDA driver in the parent (kernel)
def test_libcuda_is_found_in_the_process_map():
    maps = (
        "7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54\n"
        "7f10-7f20 r-xp 00000000 08:01 43 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"
    )
    assert loaded_libcuda(maps) == "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
    assert loaded_libcuda(maps.splitlines()[0]) is None  # NVML alone does not touch the driver


DRIVER_C = "int cuDeviceGetCount(int *count) { *count = 1; return RESULT; }\n"
PARENT = """
import ctypes, sys
from notebook_launcher.system import hardware
from notebook_launcher.resolution.start_method import choose_start_method
before = hardware.cuda_driver_initialized()
ctypes.CDLL(sys.argv[1])  # what cudaGetDeviceCount does first: load the driver
print(before, hardware.cuda_driver_initialized(), choose_start_method("auto")[0])
"""


@pytest.mark.parametrize("result, expected", [(0, "False True forkserver"), (3, "False False fork")])
def test_a_kernel_whose_driver_was_initialised_starts_workers_without_fork(tmp_path, result, expected):
    """A stand-in libcuda.so.1 answers cuDeviceGetCount like the real driver after cuInit (0) or
    before it (3, CUDA_ERROR_NOT_INITIALIZED); the parent's choice follows the driver's state."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler here to build the stand-in driver library (tried cc and gcc)")
    (tmp_path / "driver.c").write_text(DRIVER_C.replace("RESULT", str(result)))
    library = tmp_path / "libcuda.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", library, tmp_path / "driver.c"], check=True)
    out = subprocess.run(
        [sys.executable, "-c", PARENT, str(library)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-3:] == expected.split()


def test_a_driver_hazard_is_a_clear_error_for_fork_and_the_warm_pool_for_auto(monkeypatch):
    from notebook_launcher.system import hardware

    monkeypatch.setattr(hardware, "cuda_driver_initialized", lambda: True)
    method, note = choose_start_method("auto")
    assert method == "forkserver" and "CUDA driver" in note and "PYTORCH_NVML_BASED_CUDA_CHECK" in note
    with pytest.raises(ConfigError, match="start_method='fork' cannot be used: this kernel has already"):
        choose_start_method("fork")


def make_accelerator():
    from notebook_launcher import Accelerator

    return Accelerator().device.type


def test_a_worker_forked_after_the_driver_was_initialised_says_how_to_fix(monkeypatch):
    # What a child of such a parent sees
    # (the driver library mapped into the process, torch's bad-fork flag set, GPUs NVML can count).
    from notebook_launcher.system import hardware

    monkeypatch.setattr(hardware, "loaded_libcuda", lambda maps_text=None: "/usr/lib/libcuda.so.1")
    monkeypatch.setattr(hardware, "cuda_fork_hazard", lambda: None)  # a parent that did not notice
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 1)
    with pytest.raises(WorkerError) as failure:
        notebook_launch(make_accelerator, num_processes=1, start_method="fork", quiet=True, timeout=60)
    text = str(failure.value) + failure.value.traceback
    assert "Cannot re-initialize CUDA in forked subprocess" in text
    assert "start_method='spawn'" in text and "PYTORCH_NVML_BASED_CUDA_CHECK" in text
    # The fix it names for a CPU run works in the same situation.
    assert list(notebook_launch(make_accelerator, num_processes=1, use_cpu=True, quiet=True)) == ["cpu"]


def test_a_poisoned_fork_without_a_driver_is_harmless(monkeypatch):
    """A CUDA build of torch on a machine without an NVIDIA driver flags every forked child (seen
    with torch 2.6 here), but no driver was loaded: such a worker must run on the CPU, not fail."""
    from notebook_launcher.runtime.world.state import _pick_device
    from notebook_launcher.system import hardware

    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    monkeypatch.setattr(hardware, "loaded_libcuda", lambda maps_text=None: None)
    assert _pick_device(LaunchConfig(), False, 0).type == "cpu"


# ----------------------------------------------------------------- gpu_ids and the process count
def four_gpus():
    gpu = GPUInfo(0, "stand-in", 80 * 2**30, (9, 0))
    return HardwareInfo(
        cpu_count=8, gpus=tuple(GPUInfo(i, gpu.name, gpu.total_memory, (9, 0)) for i in range(4))
    )


def test_gpu_ids_set_the_default_number_of_processes(monkeypatch):
    from notebook_launcher.system import hardware

    monkeypatch.setattr(hardware, "detect", four_gpus)
    said = []
    assert count_processes(None, LaunchConfig(gpu_ids="0,2"), "notebook", four_gpus, said.append) == 2
    assert "using 2 processes, one per GPUs 0,2" in said[0]
    assert count_processes(None, LaunchConfig(), "notebook", four_gpus, said.append) == 4
    assert (
        count_processes(None, LaunchConfig(gpu_ids="0,2", use_cpu=True), "notebook", four_gpus, said.append)
        == 2
    )
    with pytest.raises(ConfigError, match="names GPU 7, but this machine has 4"):
        check_gpu_ids(LaunchConfig(gpu_ids="0,7"), four_gpus)
    with pytest.raises(ConfigError, match="comma-separated GPU indices"):
        check_gpu_ids(LaunchConfig(gpu_ids="first"), four_gpus)


# ------------------------------------------------- the user's choice of CPU on a GPU machine
def device_and_type():
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    return accelerator.device.type, accelerator.distributed_type.value, accelerator.state.backend


@pytest.mark.parametrize(
    "choice", [{"distributed_type": "MULTI_CPU"}, {"use_cpu": True}], ids=["MULTI_CPU", "use_cpu"]
)
def test_a_cpu_choice_stays_on_the_cpu_on_a_gpu_machine(monkeypatch, choice):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # inherited by the forked workers
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    result = notebook_launch(device_and_type, num_processes=2, quiet=True, timeout=60, **choice)
    assert list(result) == [("cpu", "MULTI_CPU", "gloo")] * 2


def test_distributed_type_no_means_one_process():
    said = []
    config = LaunchConfig(distributed_type="NO", num_processes=1)
    with pytest.raises(ConfigError, match="distributed_type='NO' runs a single process"):
        single_process_rule(config, 2, processes_given="num_processes=2", type_given=True, say=said.append)
    with pytest.raises(ConfigError, match="distributed_type='NO' runs a single process"):
        single_process_rule(
            LaunchConfig(distributed_type="NO", num_processes=2),
            2,
            processes_given=None,
            type_given=False,
            say=said.append,
        )
    # A config file's NO (written for one process) yields to num_processes given in the call, and says so.
    replaced = single_process_rule(
        config, 2, processes_given="num_processes=2", type_given=False, say=said.append
    )
    assert replaced.distributed_type is None and "overrides the config's distributed_type NO" in said[0]


def test_the_cli_keeps_multi_cpu_and_refuses_no_with_several_processes():
    gpus = four_gpus()

    def fill_detected(config, hardware):
        return resolve_launch(config, "script", hardware=hardware).config

    assert (
        fill_detected(LaunchConfig(distributed_type="MULTI_CPU", num_processes=2), gpus).distributed_type
        == "MULTI_CPU"
    )
    assert fill_detected(LaunchConfig(use_cpu=True, num_processes=2), gpus).distributed_type == "MULTI_CPU"
    assert fill_detected(LaunchConfig(num_processes=2), gpus).distributed_type == "MULTI_GPU"
    with pytest.raises(ConfigError, match="distributed_type='NO' runs a single process"):
        fill_detected(LaunchConfig(distributed_type="NO", num_processes=2), gpus)


def test_the_cli_lets_num_processes_beat_a_config_files_no(tmp_path):
    from notebook_launcher.cli.flags import launch_parser
    from notebook_launcher.cli.resolve import resolve_launch_config

    path = tmp_path / "c.yaml"
    path.write_text("num_processes: 1\ndistributed_type: 'NO'\nuse_cpu: true\n")  # as `config default` writes
    args = launch_parser().parse_args(["--config_file", str(path), "--num_processes", "2", "s.py"])
    request, source = resolve_launch_config(args, hardware=four_gpus())
    assert (request.config.num_processes, request.config.distributed_type) == (2, "MULTI_CPU")
    assert any("--num_processes 2 overrides the config's distributed_type NO" in n for n in source.notes)
    path.write_text("num_processes: 2\ndistributed_type: 'NO'\n")  # one file contradicting itself
    with pytest.raises(ConfigError, match="distributed_type='NO' runs a single process"):
        resolve_launch_config(
            launch_parser().parse_args(["--config_file", str(path), "s.py"]), hardware=four_gpus()
        )
