"""The command-line vocabulary: every `launch` flag in one table, its converters, and the parser.

Flags and their meanings are Accelerate's (`accelerate launch`), so existing commands work with
only the program name changed. Every flag is accepted as `--a_b` and `--a-b`. The parser never
prints or exits on its own: it raises UsageError, which the entry point turns into one message
and exit status 2.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config.launch_config import MIXED_PRECISIONS, RDZV_BACKENDS
from ..config.pipeline import SCHEDULES
from ..config.sections import (
    DYNAMO_BACKENDS,
    DYNAMO_MODES,
    FSDP_BACKWARD_PREFETCH,
    FSDP_SHARDING_STRATEGIES,
    FSDP_STATE_DICT_TYPES,
    FSDP_WRAP_POLICIES,
    OFFLOAD_DEVICES,
)
from ..errors import NotebookLauncherError, closest


class UsageError(NotebookLauncherError):
    """The command line (or an answer to the questionnaire) cannot be used; exit status 2."""


# ------------------------------------------------------------------ converters
# Each raises argparse.ArgumentTypeError with a message that says what was expected.


def count(minimum: int = 0) -> Callable[[str], int]:
    """A whole number >= minimum."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (e.g. 2)") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is too small; it must be at least {minimum}")
        return value

    convert.metavar = "N"  # type: ignore[attr-defined]
    return convert


def port(text: str) -> int:
    """A TCP port: 0 (pick a free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range; a port is 0 (pick a free one) to 65535")
    return value


port.metavar = "PORT"  # type: ignore[attr-defined]


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
    return value


def seconds(text: str) -> float:
    return positive_float(text)


positive_float.metavar = "NUMBER"  # type: ignore[attr-defined]
seconds.metavar = "SECONDS"  # type: ignore[attr-defined]


def choice(allowed: Sequence[Any]) -> Callable[[str], Any]:
    """One of `allowed`, matched case-insensitively; returns the allowed spelling."""

    def convert(text: str) -> Any:
        for option in allowed:
            if str(option).lower() == text.strip().lower():
                return option
        shown = ", ".join(str(a) for a in allowed)
        hint = closest(text, [str(a) for a in allowed])
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {shown}.{hint}")

    convert.metavar = "{" + ",".join(str(a) for a in allowed) + "}"  # type: ignore[attr-defined]
    return convert


_TRUE = {"true", "yes", "y", "1", "on"}
_FALSE = {"false", "no", "n", "0", "off"}


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(
        f"expected true or false, got {text!r} (right before the script, write the value: `--flag true script.py`)"
    )


boolean.metavar = "true|false"  # type: ignore[attr-defined]


def gpu_ids(text: str) -> str:
    """'all' or comma-separated GPU indices such as '0,1'."""
    cleaned = text.replace(" ", "")
    if cleaned.lower() == "all":
        return "all"
    if not re.fullmatch(r"\d+(,\d+)*", cleaned):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not 'all' or a comma-separated list of GPU indices like 0,1"
        )
    ids = cleaned.split(",")
    if len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"{text!r} lists a GPU more than once")
    return cleaned


gpu_ids.metavar = "IDS"  # type: ignore[attr-defined]


def std_streams(text: str) -> str:
    """torchrun's --tee format: 0 (none), 1 (stdout), 2 (stderr), 3 (both), or 'rank:n,...'."""
    if re.fullmatch(r"[0-3]", text) or re.fullmatch(r"\d+:[0-3](,\d+:[0-3])*", text):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a stream selection; use 0 (none), 1 (stdout), 2 (stderr), 3 (both), "
        "or per local rank like 0:3,1:1"
    )


std_streams.metavar = "STREAMS"  # type: ignore[attr-defined]


def layer_classes(text: str) -> str:
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if not name.isidentifier()]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of class names like 'GPT2Block,GPT2Attention'"
        )
    return ",".join(names)


layer_classes.metavar = "CLS[,CLS]"  # type: ignore[attr-defined]


# ------------------------------------------------------------------ the flag table


@dataclass(frozen=True)
class Flag:
    """One `launch` flag. `key` is where it lands in LaunchConfig ('section.field'); None: launcher-only.

    A flag whose converter is `boolean` may stand alone (`--fsdp_offload_params`) or take a value
    (`--fsdp_offload_params false`), as in Accelerate.
    """

    name: str
    help: str
    key: str | None = None
    convert: Callable[[str], Any] | None = None
    switch: bool = False  # takes no value
    metavar: str | None = None
    aliases: tuple[str, ...] = ()
    group: str = "Hardware and processes"

    def option_strings(self) -> list[str]:
        spellings = [f"--{self.name}", f"--{self.name.replace('_', '-')}", *self.aliases]
        return list(dict.fromkeys(spellings))

    @property
    def shown_metavar(self) -> str | None:
        return self.metavar or getattr(self.convert, "metavar", None)


_HW = "Hardware and processes"
_FSDP = "FSDP (fully sharded data parallel)"
_DS = "DeepSpeed"
_MESH = "Parallelism config (device mesh)"
_TRAIN = "Training"
_OTHER = "Other"


def _fsdp(name: str, help: str, convert: Callable[[str], Any] = boolean) -> Flag:
    return Flag(name, help, f"fsdp_config.{name}", convert, group=_FSDP)


def _mesh(name: str, help: str) -> Flag:
    key = f"parallelism_config_{name}"
    return Flag(key, help, f"parallelism_config.{key}", count(1), group=_MESH)


def _ds(name: str, help: str, convert: Callable[[str], Any] = boolean) -> Flag:
    return Flag(name, help, f"deepspeed_config.{name}", convert, group=_DS)


# fmt: off
FLAGS: tuple[Flag, ...] = (
    Flag("num_processes", "Total number of processes over all machines.", "num_processes", count(1)),
    Flag("num_machines", "Number of machines taking part.", "num_machines", count(1)),
    Flag("machine_rank", "Rank of this machine, 0 to num_machines-1.", "machine_rank", count(0)),
    Flag("main_process_ip", "Address of machine 0 (needed with several machines).", "main_process_ip",
         metavar="IP"),
    Flag("main_process_port", "Port on machine 0 (several machines: default 29500; one machine: unset, 0 or busy = a free port).",
         "main_process_port", port),
    Flag("cpu", "Run on CPU even if GPUs are present.", "use_cpu", switch=True),
    Flag("multi_gpu", "Data parallel over GPUs (distributed_type MULTI_GPU).", switch=True),
    Flag("gpu_ids", "GPUs to use on this machine, e.g. 0,1 (or all).", "gpu_ids", gpu_ids),
    Flag("rdzv_backend", "Rendezvous: static (fixed machine ranks) or c10d (elastic).", "rdzv_backend",
         choice(RDZV_BACKENDS)),
    Flag("max_restarts", "Restart the workers this many times after a failure.", "max_restarts", count(0)),
    Flag("monitor_interval", "Seconds between health checks of the workers.", "monitor_interval", seconds),
    Flag("num_cpu_threads_per_process", "OMP_NUM_THREADS of each worker (default: CPUs / local processes).",
         convert=count(1)),
    Flag("use_fsdp", "Shard the model with FSDP2 (distributed_type FSDP).", switch=True, group=_FSDP),
    Flag("fsdp_fully_shard", "Use FSDP2's fully_shard (fsdp_version 2, the default).", switch=True, group=_FSDP),
    _fsdp("fsdp_version", "FSDP API: 2 (fully_shard) or 1.", choice((1, 2))),
    _fsdp("fsdp_sharding_strategy", "What to shard.", choice(FSDP_SHARDING_STRATEGIES)),
    _fsdp("fsdp_auto_wrap_policy", "Which submodules become FSDP units.", choice(FSDP_WRAP_POLICIES)),
    _fsdp("fsdp_transformer_layer_cls_to_wrap", "Layer classes to wrap, e.g. GPT2Block[,Cls2].", layer_classes),
    _fsdp("fsdp_min_num_params", "Parameters per unit with SIZE_BASED_WRAP.", count(0)),
    _fsdp("fsdp_offload_params", "Keep parameters and gradients on CPU."),
    _fsdp("fsdp_state_dict_type", "How checkpoints are written.", choice(FSDP_STATE_DICT_TYPES)),
    _fsdp("fsdp_activation_checkpointing", "Recompute activations in backward."),
    _fsdp("fsdp_reshard_after_forward", "Free gathered parameters after forward."),
    _fsdp("fsdp_backward_prefetch", "Backward prefetch mode (FSDP1).", choice(FSDP_BACKWARD_PREFETCH)),
    _fsdp("fsdp_forward_prefetch", "Prefetch the next unit in forward."),
    _fsdp("fsdp_use_orig_params", "Keep the original parameters (FSDP1)."),
    _fsdp("fsdp_cpu_ram_efficient_loading", "Load weights on rank 0 only."),
    _fsdp("fsdp_sync_module_states", "Broadcast rank 0's weights at the start."),
    Flag("use_parallelism_config", "Train on a ParallelismConfig mesh (the sizes alone are enough).",
         switch=True, group=_MESH),
    _mesh("dp_replicate_size", "Data-parallel replicas (HSDP with dp_shard_size)."),
    _mesh("dp_shard_size", "Ranks FSDP2 shards the model over."),
    _mesh("tp_size", "Ranks each layer is split over (tensor parallel)."),
    _mesh("cp_size", "Ranks each sequence is split over (context parallel: CUDA with SDPA only)."),
    Flag("parallelism_config_cp_backend", "Context-parallel backend.", "parallelism_config.parallelism_config_cp_backend",
         choice(("torch",)), group=_MESH),
    _mesh("pp_size", "Pipeline stages over ranks (ours; model.step runs the schedule)."),
    Flag("parallelism_config_pp_schedule", "Pipeline schedule.", "parallelism_config.parallelism_config_pp_schedule",
         choice(tuple(SCHEDULES)), group=_MESH),
    _mesh("pp_n_microbatches", "Micro-batches each batch is cut into (default: the stages)."),
    _mesh("pp_virtual_stages", "Stages per rank (interleaved, looped and zero-bubble schedules)."),
    Flag("parallelism_config_pp_split_points", "Blocks where a stage begins, e.g. layers.4[,layers.8].",
         "parallelism_config.parallelism_config_pp_split_points", str, metavar="NAMES", group=_MESH),
    Flag("use_deepspeed", "Train with DeepSpeed (distributed_type DEEPSPEED).", switch=True, group=_DS),
    Flag("deepspeed", "A DeepSpeed JSON config file (implies --use_deepspeed).",
         "deepspeed_config.deepspeed_config_file", metavar="FILE", group=_DS,
         aliases=("--deepspeed_config_file", "--deepspeed-config-file")),
    _ds("zero_stage", "ZeRO stage.", choice((0, 1, 2, 3))),
    _ds("offload_optimizer_device", "Where optimizer states live.", choice(OFFLOAD_DEVICES)),
    _ds("offload_param_device", "Where parameters live (ZeRO-3).", choice(OFFLOAD_DEVICES)),
    _ds("gradient_clipping", "Clip gradients to this norm.", positive_float),
    _ds("zero3_init_flag", "Build ZeRO-3 models sharded from the start."),
    _ds("zero3_save_16bit_model", "Save a consolidated 16-bit model with ZeRO-3."),
    Flag("mixed_precision", "Mixed precision.", "mixed_precision", choice(MIXED_PRECISIONS), group=_TRAIN),
    Flag("gradient_accumulation_steps", "Batches per optimizer step.", "gradient_accumulation_steps", count(1),
         group=_TRAIN),
    Flag("dynamo_backend", "torch.compile the model in prepare() with this backend (no: off).",
         "dynamo_config.dynamo_backend", choice(tuple(b.lower() for b in DYNAMO_BACKENDS)), group=_TRAIN),
    Flag("dynamo_mode", "torch.compile mode.", "dynamo_config.dynamo_mode", choice(DYNAMO_MODES), group=_TRAIN),
    Flag("dynamo_use_fullgraph", "torch.compile with fullgraph=True.", "dynamo_config.dynamo_use_fullgraph",
         boolean, group=_TRAIN),
    Flag("dynamo_use_dynamic", "torch.compile with dynamic shapes.", "dynamo_config.dynamo_use_dynamic", boolean,
         group=_TRAIN),
    Flag("dynamo_use_regional_compilation", "Compile each repeated block once.",
         "dynamo_config.dynamo_use_regional_compilation", boolean, group=_TRAIN),
    Flag("config_file", "Config file (default: the per-user one, when it exists).", metavar="FILE",
         group=_OTHER),
    Flag("generate_config", "Ask the config questions first and write --config_file.", switch=True,
         group=_OTHER),
    Flag("debug", "Print the resolved config and rendezvous; TORCH_DISTRIBUTED_DEBUG=DETAIL.", "debug",
         switch=True, group=_OTHER),
    Flag("quiet", "Print none of the launcher's own messages except errors.", switch=True, aliases=("-q",),
         group=_OTHER),
    Flag("tee", "Also write worker output into --log_dir: 0 none, 1 stdout, 2 stderr, 3 both, or 0:3,1:1.",
         convert=std_streams, aliases=("-t",), group=_OTHER),
    Flag("log_dir", "Directory for worker logs and error files.", metavar="DIR", group=_OTHER),
    Flag("rank_prefix", "Prefix each worker output line with its rank, [rank0] (default true).",
         convert=boolean, group=_OTHER),
    Flag("report_performance", "At the end, print each rank's step breakdown (data, compute, wait) and "
         "the straggler verdict (docs/performance.md).", switch=True, group=_OTHER),
)
# fmt: on

FLAGS_BY_NAME = {flag.name: flag for flag in FLAGS}
FSDP_FLAGS = tuple(f.name for f in FLAGS if f.group == _FSDP and f.name != "use_fsdp")
DEEPSPEED_FLAGS = tuple(
    f.name for f in FLAGS if f.group == _DS and f.name not in ("use_deepspeed", "deepspeed")
)


# ------------------------------------------------------------------ the parser


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of printing and exiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(_explain(message, self))


def _explain(message: str, parser: argparse.ArgumentParser) -> str:
    """argparse's message, made to name the fix."""
    unknown = re.match(r"unrecognized arguments: (\S+)", message)
    if unknown:
        token = unknown.group(1)
        if token.startswith("-"):
            options = [s for a in parser._actions for s in a.option_strings]  # noqa: SLF001
            return (
                f"unknown flag {token!r}.{closest(token.split('=')[0], options)} See `{parser.prog} --help`."
            )
        return f"unexpected argument {token!r}. See `{parser.prog} --help`."
    if "training_script" in message and "required" in message:
        return "missing the script to run: notebook-launcher launch [flags] script.py [script args]."
    return message if message.endswith(("?", "!")) else message.rstrip(".") + "."


def add_launch_flags(parser: argparse.ArgumentParser) -> None:
    """Add every flag of FLAGS to `parser`, grouped for --help. Flags not given parse to None."""
    groups: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(flag.group)
        options = flag.option_strings()
        common = {"dest": flag.name, "default": None, "help": flag.help}
        if flag.switch:
            groups[flag.group].add_argument(*options, action="store_true", **common)
        elif flag.convert is boolean:
            groups[flag.group].add_argument(
                *options, nargs="?", const=True, type=boolean, metavar=flag.shown_metavar, **common
            )
        else:
            groups[flag.group].add_argument(*options, type=flag.convert, metavar=flag.shown_metavar, **common)


LAUNCH_EPILOG = """\
Precedence: a flag > the config file (--config_file, else the per-user default file) > detected values.
Every flag is also accepted with dashes (--num-processes). Arguments after the script go to the script.

examples:
  notebook-launcher launch --num_processes 2 train.py --lr 1e-3
  notebook-launcher launch --config_file accelerate_config.yaml -m mypackage.train
  notebook-launcher launch --num_machines 2 --machine_rank 0 --main_process_ip 10.0.0.1 --num_processes 16 train.py

exit status: 0 ok; 1 the script failed on some rank; 2 bad input (nothing started); 128+N stopped by signal N.
"""


def launch_parser(prog: str = "notebook-launcher launch", *, with_script: bool = True) -> Parser:
    """The parser of `launch` (and, without the script, of `test`)."""
    parser = Parser(
        prog=prog,
        description="Run a training script on several processes (and machines) through torch.distributed.run.",
        epilog=LAUNCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_launch_flags(parser)
    if with_script:
        parser.add_argument(
            "-m",
            "--module",
            action="store_true",
            help="Treat the script as a Python module name, like `python -m`.",
        )
        parser.add_argument("training_script", nargs="?", help="The script (or with -m, module) to run.")
        parser.add_argument(
            "training_script_args", nargs=argparse.REMAINDER, help="Arguments passed to the script unchanged."
        )
    return parser
