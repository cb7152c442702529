"""How many processes, on which devices, and what a launch can apply: one rule per question for
every entry (resolution/resolve.py calls these; nothing else decides them)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from ..config import LaunchConfig
from ..errors import ConfigError, install_hint
from ..records.names import DEFAULT_PORT
from ..system.hardware import HardwareInfo, visible_gpu_count
from .request import Entry

# Ranks per machine when neither the call nor the config says and no GPU is here: a notebook run
# shows two ranks (enough to see data parallel work); a script runs one, as `accelerate launch` does.
CPU_DEFAULT = {"notebook": 2, "ranks": 2, "node": 2, "script": 1, "in_process": 1}


def count_processes(
    requested: int | None,
    config: LaunchConfig,
    entry: Entry,
    hardware: Callable[[], HardwareInfo],
    say: Callable[[str], None],
    cluster_default: Callable[[], tuple[int, str]] | None = None,
) -> int:
    """Ranks on each machine: the number asked for here, else the config's total over its machines,
    else one per visible GPU, else the entry's CPU default (a cluster's own default for cluster=)."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise ConfigError(
                f"num_processes={requested!r} must be a positive integer (processes on each machine)."
            )
        return requested
    if config.num_processes is not None:  # the total, which LaunchConfig checks divides over machines
        return config.num_processes // config.num_machines
    if cluster_default is not None:
        count, where = cluster_default()
        say(f"num_processes not given; {count} rank(s) per node on {where}.")
        return count
    gpus = 0 if config.runs_on_cpu else visible_gpu_count(config.gpu_ids, hardware())
    if gpus:
        which = f"GPUs {config.gpu_ids}" if config.gpu_ids and config.gpu_ids != "all" else "GPU"
        say(f"num_processes not given; using {gpus} processes, one per {which}.")
        return gpus
    count = CPU_DEFAULT[entry]
    if entry != "script":  # a script's one process is Accelerate's default, not worth a line
        say(f"num_processes not given and no GPU found; using {count} CPU processes.")
    return count


def single_process_rule(
    config: LaunchConfig,
    world: int,
    *,
    processes_given: str | None,
    type_given: bool,
    say: Callable[[str], None],
) -> LaunchConfig:
    """distributed_type NO means one process: never turned into data parallel behind the user's back.

    NO given in the same place as several processes is an error. NO from a config file (which
    `config default` writes for one process) yields to a process count given in the call or on the
    command line (`processes_given` names it, e.g. "num_processes=2"), with a note: it is the more
    explicit of the two, and the strategy is then detected.
    """
    if config.distributed_type != "NO" or world == 1:
        return config
    if type_given or not processes_given:
        raise ConfigError(
            f"distributed_type='NO' runs a single process, but this launch has {world} processes. Launch one "
            "process (num_processes=1), or set a distributed_type that uses several (MULTI_GPU, MULTI_CPU, FSDP, "
            "DEEPSPEED), or leave distributed_type unset to detect it."
        )
    say(
        f"{processes_given} overrides the config's distributed_type NO (one process); the strategy is "
        "detected instead."
    )
    data = config.to_dict()
    data["distributed_type"] = None
    return LaunchConfig.from_dict(data, source="arguments")


def check_gpu_ids(config: LaunchConfig, hardware: Callable[[], HardwareInfo]) -> None:
    """gpu_ids must name GPUs this machine has, unless the run is on CPU."""
    if not config.gpu_ids or config.gpu_ids == "all" or config.runs_on_cpu:
        return
    ids = [i.strip() for i in str(config.gpu_ids).split(",")]
    if not all(i.isdigit() for i in ids):
        raise ConfigError(
            f"gpu_ids={config.gpu_ids!r} must be comma-separated GPU indices such as '0,1', or 'all'."
        )
    count = hardware().cuda_device_count
    missing = [i for i in ids if int(i) >= count]
    if missing:
        raise ConfigError(
            f"gpu_ids={config.gpu_ids!r} names GPU {missing[0]}, but this machine has {count} CUDA GPU(s); "
            f"list indices below {count}, or pass use_cpu=True (--cpu) to train on CPU."
        )


def visible_devices(config: LaunchConfig) -> str | None:
    """CUDA_VISIBLE_DEVICES for every rank: the listed GPUs, or None to inherit the caller's."""
    if config.gpu_ids and config.gpu_ids != "all" and not config.use_cpu:
        return str(config.gpu_ids)
    return None


def check_restarts(config: LaunchConfig, entry: Entry) -> None:
    """max_restarts is applied by notebook_launch on one machine and by torchrun's agent for a
    script; any other launch that asks for it is an error naming the alternative, never ignored.

    rdzv_backend (static or c10d) and monitor_interval are honoured everywhere as they are: machine 0's
    launcher hosts the store and the others wait for it, and the supervisor reacts to a worker's pipe
    at once, so any polling interval is met.
    """
    if not config.max_restarts or entry == "script":
        return
    if entry != "notebook":
        why = "this kind of launch does not restart failed workers"
    elif config.num_machines > 1:
        why = "notebook_launch restarts the workers of one machine only (a restart needs a new rendezvous)"
    else:
        return
    raise ConfigError(
        f"max_restarts={config.max_restarts!r} cannot be applied by notebook_launch: {why}. Set max_restarts=0 "
        "(the default) here, or run the script with `notebook-launcher launch`, whose torchrun agent applies it."
    )


def check_machines(config: LaunchConfig) -> None:
    """Several machines need machine 0's address and one fixed port, the same on every machine."""
    if config.num_machines > 1 and not config.main_process_ip:
        raise ConfigError(
            f"num_machines={config.num_machines} needs main_process_ip (master_addr): the address of machine 0 "
            "that every machine can reach; pass master_addr= (--main_process_ip)."
        )
    if config.main_process_port == 0 and config.num_machines > 1:
        raise ConfigError(
            "main_process_port=0 (pick a free port) works only on one machine: every machine must be given the "
            f"same port; pass e.g. master_port={DEFAULT_PORT} (--main_process_port {DEFAULT_PORT})."
        )


def check_script_strategy(config: LaunchConfig) -> None:
    """What a script's strategy needs before anything starts (no hardware needed, so it fails fast)."""
    ds_file = config.deepspeed_config.deepspeed_config_file
    if config.distributed_type == "DEEPSPEED" and ds_file and not Path(ds_file).expanduser().is_file():
        raise ConfigError(f"DeepSpeed config file {ds_file!r} does not exist; pass the path of a JSON file.")
    if config.distributed_type == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(
            "distributed_type=DEEPSPEED needs the deepspeed package, which is not installed here; "
            f"install it with {install_hint('deepspeed', 'deepspeed')}, or choose another strategy."
        )


def script_strategy(config: LaunchConfig, local: int, world: int, hardware: HardwareInfo) -> str:
    """The distributed_type a script's workers get (as Accelerate's launcher writes it): the user's
    choice when given (MULTI_CPU stays on CPU on a GPU machine), else detected from the GPUs here.
    Notebook entries leave an unset type to the worker, which reads its own device."""
    gpus = visible_gpu_count(config.gpu_ids, hardware)
    on_gpu = gpus > 0 and not config.runs_on_cpu
    chosen = config.distributed_type
    if chosen in ("FSDP", "DEEPSPEED"):
        return chosen
    if chosen == "MULTI_GPU" and not on_gpu:
        if config.use_cpu:
            return "MULTI_CPU" if world > 1 else "NO"
        raise ConfigError(
            "distributed_type=MULTI_GPU needs CUDA GPUs and none is visible here; add --cpu "
            "(or set distributed_type: MULTI_CPU) to run on CPU."
        )
    strategy = ("MULTI_GPU" if on_gpu else "MULTI_CPU") if world > 1 else "NO"
    if strategy == "MULTI_GPU" and local > gpus:
        raise ConfigError(
            f"num_processes={world} means {local} processes on this machine, one per GPU, but only {gpus} GPU(s) "
            "are visible; lower --num_processes, or add --cpu to run on CPU."
        )
    check_precision(config, hardware, on_gpu)
    return strategy


def check_precision(config: LaunchConfig, hardware: HardwareInfo, on_gpu: bool) -> None:
    """A precision the run's devices cannot compute in is an error before anything starts."""
    if config.mixed_precision == "fp8" and not (on_gpu and hardware.fp8_supported):
        raise ConfigError(
            "mixed_precision='fp8' needs CUDA GPUs of compute capability 8.9+ (Ada/Hopper) and this run has "
            "none; use --mixed_precision bf16."
        )
    if config.mixed_precision == "bf16" and on_gpu and not hardware.bf16_supported:
        raise ConfigError(
            "mixed_precision='bf16' needs GPUs of compute capability 8.0+ (Ampere) and this machine's are older; "
            "use --mixed_precision fp16."
        )
