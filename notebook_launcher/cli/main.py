"""`notebook-launcher`: launch | config | env | test — the same runs as `notebook_launch`, from a
shell — plus estimate-memory and merge-weights (cli/estimate.py, cli/merge_weights.py).

Exit status: 0 success; 1 the script failed on some rank (or the launch could not rendezvous);
2 bad input (unknown flag, bad value, bad config file, missing script), always as one message
without a Python traceback; 128+N when stopped by signal N (130 for Ctrl-C).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ..errors import NotebookLauncherError, closest
from ..records.names import DEFAULT_PORT
from ..system.process_exit import leave
from .flags import Parser, UsageError, launch_parser

if TYPE_CHECKING:
    from .torchrun import RunPlan

PROG = "notebook-launcher"
COMMANDS = ("launch", "config", "env", "test", "estimate-memory", "merge-weights")
OVERVIEW = f"""usage: {PROG} <command> [options]

Run PyTorch training on several processes and machines (on torch.distributed.run).

commands:
  launch [flags] script.py [args]   run a script (or -m module) on every process
  config [--config_file F]          answer a few questions, write the config file
  config default [--config_file F]  write a config for this machine without asking
  config show [--config_file F]     print the config a launch would use
  env [--config_file F]             versions, hardware and config, for bug reports
  test [flags]                      check that distributed training works here
  estimate-memory MODEL [options]   bytes per rank per strategy for a model in your code
  merge-weights CHECKPOINT OUTPUT   one weights file from a sharded FSDP/DeepSpeed checkpoint

`{PROG} <command> --help` lists a command's options.
"""


def run() -> NoReturn:
    """The `notebook-launcher` console script: main(), then the process ends without Python's
    teardown of torch, which `launch` loaded (system/process_exit.py)."""
    leave(main())


def main(argv: Sequence[str] | None = None) -> int:
    """The command line's work; returns the exit status (run() ends the process with it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else None
    try:
        return _dispatch(command, argv[1:])
    except (UsageError, NotebookLauncherError) as exc:
        where = f"{PROG} {command}" if command in COMMANDS else PROG
        print(f"{where}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted.", file=sys.stderr)
        return 130
    except SystemExit as exc:  # argparse's --help
        return exc.code if isinstance(exc.code, int) else 0


def _dispatch(command: str | None, rest: list[str]) -> int:
    if command in ("-h", "--help"):
        print(OVERVIEW, end="")
        return 0
    if command in ("-V", "--version"):
        from .._version import __version__

        print(f"{PROG} {__version__}")
        return 0
    if command is None:
        print(OVERVIEW, end="", file=sys.stderr)
        return 2
    if command not in COMMANDS:
        raise UsageError(
            f"unknown command {command!r}.{closest(command, COMMANDS)} Commands: {', '.join(COMMANDS)}."
        )
    if command == "estimate-memory":
        from .estimate import estimate_command

        return estimate_command(rest, f"{PROG} {command}")
    if command == "merge-weights":
        from .merge_weights import merge_command

        return merge_command(rest, f"{PROG} {command}")
    return {"launch": launch_command, "config": config_command, "env": env_command, "test": test_command}[
        command
    ](rest)


# ------------------------------------------------------------------ launch / test


def launch_command(argv: list[str]) -> int:
    parser = launch_parser()
    args = parser.parse_args(argv)
    if args.generate_config:
        path = _generate_config(args.config_file)
        if args.training_script is None:
            return 0
        args.config_file = str(path)
    if args.training_script is None:
        raise UsageError(
            "missing the script to run: notebook-launcher launch [flags] script.py [script args]."
        )
    return launch_with(args, _target(args))


def test_command(argv: list[str]) -> int:
    from .selftest import choose_processes, verdict

    args = launch_parser(f"{PROG} test", with_script=False).parse_args(argv)
    if args.generate_config:
        args.config_file = str(_generate_config(args.config_file))
    choose_processes(args)
    plan = prepare_launch(args, ["module", "notebook_launcher.cli.selftest"])
    status = execute_plan(plan)
    message, failed = verdict(status, plan.config)
    print(f"{PROG} test: {message}", file=sys.stderr if failed else sys.stdout)
    return status


def _target(args: object) -> list[str]:
    """What each worker runs, after checking it exists (a typo should not start N processes)."""
    name: str = args.training_script  # type: ignore[attr-defined]
    script_args: list[str] = list(args.training_script_args)  # type: ignore[attr-defined]
    if args.module:  # type: ignore[attr-defined]
        top = name.split(".")[0]
        if not top.isidentifier() or importlib.util.find_spec(top) is None:
            raise UsageError(
                f"module {name!r} cannot be found (tried `python -m {name}` from {os.getcwd()!r})."
            )
        return ["module", name, *script_args]
    if name.startswith("-"):
        raise UsageError(f"unknown flag {name!r}. See `{PROG} launch --help`.")
    if not Path(name).exists():
        hint = " Did you mean -m to run a module?" if "." in name and not name.endswith(".py") else ""
        raise UsageError(f"script {name!r} does not exist (looked in {os.getcwd()!r}).{hint}")
    return ["script", name, *script_args]


def launch_with(args: object, target: list[str]) -> int:
    """Resolve the config, print what --debug asks for, and run through torchrun."""
    return execute_plan(prepare_launch(args, target))


def prepare_launch(args: object, target: list[str]) -> RunPlan:
    """The plan torchrun will run: config resolved, notes and --debug output printed."""
    from .resolve import resolve_launch_config
    from .torchrun import build_plan, describe_plan

    request, source = resolve_launch_config(args)  # type: ignore[arg-type]
    plan = build_plan(
        request,
        target,
        tee=args.tee,  # type: ignore[attr-defined]
        log_dir=args.log_dir,  # type: ignore[attr-defined]
        rank_prefix=args.rank_prefix is not False,  # type: ignore[attr-defined]
        report_performance=bool(getattr(args, "report_performance", False)),
    )
    quiet = bool(args.quiet)  # type: ignore[attr-defined]
    for note in (*source.notes, *plan.notes):
        if not quiet:
            print(f"{PROG}: {note}", file=sys.stderr)
    if plan.config.debug:
        print(
            "\n".join(f"{PROG}: {line}" for line in describe_plan(plan, source.describe()).splitlines()),
            file=sys.stderr,
        )
    sys.stderr.flush()
    return plan


def execute_plan(plan: RunPlan) -> int:
    from .torchrun import execute

    return execute(plan, debug=plan.config.debug)


# ------------------------------------------------------------------ config / env


def _generate_config(config_file: str | None) -> Path:
    """Run the questionnaire on stdin/stdout and write the answers to `config_file` (or the default file)."""
    from ..config import default_config_path, save_config
    from ..system.hardware import detect
    from .questionnaire import Asker, ask_config

    path = Path(config_file).expanduser() if config_file else default_config_path()
    print(f"Writing a config to {path}. Press Enter to take the default shown in brackets.")
    config = ask_config(Asker(sys.stdin, sys.stdout), detect())
    save_config(config, path)
    default = not config_file
    print(f"Config written to {path}.")
    print(f"Launch with: {PROG} launch {'' if default else f'--config_file {path} '}script.py")
    return path


def config_command(argv: list[str]) -> int:
    parser = Parser(prog=f"{PROG} config", description="Write or show the config file a launch reads.")
    parser.add_argument(
        "action",
        nargs="?",
        default="ask",
        help="ask (default): questionnaire; default: write without asking; show",
    )
    parser.add_argument(
        "--config_file", "--config-file", metavar="FILE", help="The file (default: per-user)."
    )
    parser.add_argument("--force", action="store_true", help="With `default`: overwrite an existing file.")
    args = parser.parse_args(argv)
    if args.action == "ask":
        _generate_config(args.config_file)
        return 0
    if args.action == "default":
        return _write_default(args.config_file, args.force)
    if args.action == "show":
        return _show(args.config_file)
    actions = ("ask", "default", "show")
    raise UsageError(
        f"unknown config action {args.action!r}.{closest(args.action, actions)} Use: default, show."
    )


def _write_default(config_file: str | None, force: bool) -> int:
    from ..config import default_config_path, save_config
    from ..config.basic_config import basic_config

    path = Path(config_file).expanduser() if config_file else default_config_path()
    if path.exists() and not force:
        raise UsageError(
            f"{str(path)!r} already exists; pass --force to overwrite it, or see it with `config show`."
        )
    config = basic_config()
    save_config(config, path)
    print(
        f"Config for this machine ({config.num_processes} process(es), {config.distributed_type}) written to {path}."
    )
    return 0


def _show(config_file: str | None) -> int:
    import yaml

    from ..config import to_file_dict
    from ..system.hardware import detect
    from .resolve import read_config_file, shown_config

    config, source = read_config_file(config_file)
    resolved = shown_config(config, detect())
    print(f"# {source.describe()}; values not in it are detected on this machine")
    if resolved.main_process_port is None:
        print(
            f"# main_process_port unset: any free port on one machine, {DEFAULT_PORT} over several "
            "(chosen when a launch starts)"
        )
    print(yaml.safe_dump(to_file_dict(resolved), sort_keys=False), end="")
    return 0


def env_command(argv: list[str]) -> int:
    parser = Parser(prog=f"{PROG} env", description="Print versions, hardware and config for a bug report.")
    parser.add_argument("--config_file", "--config-file", metavar="FILE", help="The config to show.")
    args = parser.parse_args(argv)
    from .report import env_report

    print(env_report(args.config_file))
    return 0
