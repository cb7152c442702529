"""`notebook-launcher estimate-memory MODEL`: the estimate_memory table, from a shell.

MODEL is `file.py[:name]` or `package.module:name` (a function or class that builds the model);
it is built on the meta device, so nothing is allocated and nothing is downloaded. Accelerate's
`accelerate estimate-memory` takes a Hub model name and lists load sizes per dtype; this command
estimates training memory per rank per strategy instead, for a model defined in your code.
"""

from __future__ import annotations

from ..estimate.memory_estimate import OPTIMIZER_STATES, PRECISIONS, STRATEGIES, estimate_memory
from .flags import Parser, UsageError, count

# Strategy names as typed on a command line (case-insensitive) -> the table's names.
STRATEGY_FLAGS = {
    "ddp": "DDP",
    "full_shard": "FSDP FULL_SHARD",
    "fsdp": "FSDP FULL_SHARD",
    "shard_grad_op": "FSDP SHARD_GRAD_OP",
    "hybrid_shard": "FSDP HYBRID_SHARD",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero3": "ZeRO-3",
}
OFFLOAD: dict[str, bool | str] = {"no": False, "yes": True, "both": "both"}


def estimate_parser(prog: str) -> Parser:
    parser = Parser(
        prog=prog,
        description="Bytes per rank for parameters, gradients and optimizer state, per strategy "
        "(no activations). The model is built on the meta device: no memory, no download.",
    )
    parser.add_argument("model", help="file.py[:name] or package.module:name, building the model")
    parser.add_argument(
        "--num_processes",
        "--num-processes",
        type=count(1),
        nargs="+",
        default=[2],
        metavar="N",
        help="total processes (one or several counts; default 2)",
    )
    parser.add_argument(
        "--num_machines",
        "--num-machines",
        type=count(1),
        default=1,
        metavar="N",
        help="machines the processes are spread over (HYBRID_SHARD shards within one)",
    )
    parser.add_argument(
        "--strategies",
        nargs="+",
        metavar="S",
        default=None,
        help=f"some of: {', '.join(STRATEGY_FLAGS)} (default: all)",
    )
    parser.add_argument(
        "--mixed_precision",
        "--mixed-precision",
        nargs="+",
        default=["no"],
        metavar="P",
        help=f"one or several of: {', '.join(PRECISIONS)}",
    )
    parser.add_argument("--optimizer", default="adamw", help=f"one of: {', '.join(OPTIMIZER_STATES)}")
    parser.add_argument(
        "--tp_size", "--tp-size", type=count(1), default=1, metavar="N",
        help="also a row for tensor parallel over N ranks (the model's own _tp_plan says which layers)",
    )  # fmt: skip
    parser.add_argument(
        "--dp_shard_size", "--dp-shard-size", type=count(1), default=1, metavar="N",
        help="with --tp_size: FSDP2 over N ranks on top of the split layers (processes = tp x dp_shard)",
    )  # fmt: skip
    parser.add_argument(
        "--pp_size", "--pp-size", type=count(1), default=1, metavar="N",
        help="also a row for a pipeline over N stages (a chain of blocks cut evenly by parameter count)",
    )  # fmt: skip
    parser.add_argument("--offload", default="no", help="no, yes, or both (rows without and with)")
    return parser


def estimate_command(argv: list[str], prog: str) -> int:
    args = estimate_parser(prog).parse_args(argv)
    strategies = None
    if args.strategies:
        strategies = []
        for name in args.strategies:
            key = name.lower().replace("-", "_").replace(" ", "_")
            if key not in STRATEGY_FLAGS:
                raise UsageError(f"unknown strategy {name!r}; use some of: {', '.join(STRATEGY_FLAGS)}.")
            strategies.append(STRATEGY_FLAGS[key])
    if args.offload not in OFFLOAD:
        raise UsageError(f"--offload {args.offload!r}: use no, yes or both.")
    table = estimate_memory(
        args.model,
        args.num_processes,
        strategies=strategies or list(STRATEGIES),
        mixed_precision=args.mixed_precision,
        optimizer=args.optimizer,
        offload=OFFLOAD[args.offload],
        num_machines=args.num_machines,
        tp_size=args.tp_size,
        dp_shard_size=args.dp_shard_size,
        pp_size=args.pp_size,
    )
    print(table)
    return 0
