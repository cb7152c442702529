"""The IPython magics: `%load_ext notebook_launcher`, then

    %ranks start 2 --mixed_precision bf16    start ranks (notebook_launch's arguments and config handling)
    %%ranks                                  run the cell on every rank, in its own namespace
    %%ranks 0,2                              ... on some ranks only
    %ranks pull loss / %ranks push lr        names between the kernel and the ranks
    %ranks status / stop / restart

Front ends highlight a cell by the kernel's language: JupyterLab 4 and Notebook 7 show a %%ranks
cell as Python, the `%%ranks` line included (no extension needed, nothing to register).
"""

from __future__ import annotations

import ast
import shlex
from typing import TYPE_CHECKING, Any, cast

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ..config import LaunchConfig
from ..errors import closest
from .ranks import Ranks

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

USAGE = """%ranks start [N] [--mixed_precision bf16] [--config_file PATH | --config NAME] [--start_method M]
              [--show_ranks 0,1] [--quiet] [--<LaunchConfig field> VALUE ...]
%ranks stop | restart | status
%ranks pull NAME [NAME ...] [--ranks 0,1]     set NAME here to the list of every rank's value
%ranks push NAME [NAME ...] [--ranks 0,1]     send NAME from here to the ranks
%%ranks [all | 0 | 0,2]                         run the cell on the ranks (all by default)"""

_LAUNCH_OPTIONS = {"num_processes", "config", "config_file", "start_method", "show_ranks", "quiet"}
_CONFIG_FIELDS = set(LaunchConfig.__dataclass_fields__)


def parse_rank_list(text: str) -> list[int] | None:
    """'all' / '' -> None (every rank); '0' -> [0]; '0,2' -> [0, 2]."""
    text = text.strip()
    if text in ("", "all"):
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{text!r} is not a rank list; write `all`, `0` or `0,2`.") from None


def parse_start(words: list[str], user_ns: dict[str, Any]) -> dict[str, Any]:
    """`%ranks start` arguments -> Ranks(...) keyword arguments."""
    options: dict[str, Any] = {}
    words = list(words)
    if words and not words[0].startswith("--"):
        options["num_processes"] = _number(words.pop(0), "N")
    while words:
        flag = words.pop(0)
        name = flag[2:].replace("-", "_") if flag.startswith("--") else None
        if name not in _LAUNCH_OPTIONS | _CONFIG_FIELDS:
            known = sorted(_LAUNCH_OPTIONS | _CONFIG_FIELDS)
            raise UsageError(f"%ranks start: unknown option {flag!r}.{closest(str(name), known)}\n{USAGE}")
        if name == "quiet":
            options["quiet"] = True
            continue
        if not words:
            raise UsageError(f"%ranks start: {flag} needs a value.")
        options[name] = _value(name, words.pop(0), user_ns)
    if "config_file" in options:
        if "config" in options:
            raise UsageError("%ranks start: give --config or --config_file, not both.")
        options["config"] = options.pop("config_file")
    return options


def _number(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"%ranks start: {what} must be a number of processes, got {text!r}.") from None


def _value(name: str, text: str, user_ns: dict[str, Any]) -> Any:
    if name == "num_processes":
        return _number(text, "--num_processes")
    if name == "show_ranks":
        return parse_rank_list(text)
    if name == "config":
        # a variable of this notebook (a LaunchConfig, a dict, a ConfigPanel) or a file path
        value = user_ns.get(text, text)
        return getattr(value, "config", value) if not isinstance(value, (str, dict)) else value
    if text[:1] in "{[":
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise UsageError(f"%ranks start: --{name} {text!r} is not a Python literal.") from None
    return text  # LaunchConfig converts and checks it, naming the field when it is wrong


@magics_class
class RanksMagics(Magics):
    """%ranks (control) and %%ranks (run a cell on the ranks); one group per kernel."""

    ranks: Ranks | None = None

    @line_cell_magic("ranks")  # type: ignore[arg-type]  # IPython types its decorator with an unbound TypeVar
    def ranks_magic(self, line: str, cell: str | None = None) -> None:
        if cell is not None:
            return self._run_cell(line, cell)
        words = shlex.split(line)
        if not words or words[0] in ("help", "-h", "--help"):
            print(USAGE)
            return None
        command, rest = words[0], words[1:]
        handler = getattr(self, f"_{command}", None)
        if command not in ("start", "stop", "restart", "status", "pull", "push") or handler is None:
            raise UsageError(
                f"%ranks {command}: unknown command.{closest(command, ['start', 'stop', 'restart', 'status', 'pull', 'push'])}\n{USAGE}"
            )
        return handler(rest)

    # ------------------------------------------------------------- commands
    def _start(self, words: list[str]) -> None:
        if self.ranks is not None and self.ranks.running:
            raise UsageError("Ranks are already running: `%ranks stop` first, or `%ranks restart`.")
        self.ranks = Ranks(**parse_start(words, self._namespace))
        print(self.ranks.status())

    def _stop(self, words: list[str]) -> None:
        if self.ranks is not None:
            self.ranks.stop()
        print("ranks: stopped")

    def _restart(self, words: list[str]) -> None:
        ranks = self._live()
        ranks.restart()
        print(ranks.status())

    def _status(self, words: list[str]) -> None:
        print(self.ranks.status() if self.ranks is not None else "ranks: not started (`%ranks start N`)")

    def _pull(self, words: list[str]) -> None:
        names, ranks = self._names_and_ranks(words, "pull")
        for name in names:
            self._namespace[name] = self._live().pull(name, ranks=ranks)

    def _push(self, words: list[str]) -> None:
        names, ranks = self._names_and_ranks(words, "push")
        missing = [n for n in names if n not in self._namespace]
        if missing:
            raise UsageError(f"%ranks push: {missing[0]!r} is not defined in this notebook.")
        self._live().push({n: self._namespace[n] for n in names}, ranks=ranks)

    def _run_cell(self, line: str, cell: str) -> None:
        ranks = parse_rank_list(line)
        count = getattr(self.shell, "execution_count", None)
        self._live().run_cell(cell, ranks=ranks, filename=f"<%%ranks In[{count}]>")

    # ------------------------------------------------------------ helpers
    @property
    def _namespace(self) -> dict[str, Any]:
        """The notebook's namespace (a registered magic always has its shell)."""
        return cast("InteractiveShell", self.shell).user_ns

    def _live(self) -> Ranks:
        if self.ranks is None or not self.ranks.running:
            raise UsageError(
                "No ranks are running: start them with `%ranks start 2` (any number of processes)."
            )
        return self.ranks

    @staticmethod
    def _names_and_ranks(words: list[str], command: str) -> tuple[list[str], list[int] | None]:
        ranks = None
        if "--ranks" in words:
            at = words.index("--ranks")
            if at + 1 >= len(words):
                raise UsageError(f"%ranks {command}: --ranks needs a value such as 0,2.")
            ranks = parse_rank_list(words[at + 1])
            words = words[:at] + words[at + 2 :]
        if not words or not all(w.isidentifier() for w in words):
            raise UsageError(
                f"%ranks {command} NAME [NAME ...]: names of variables, got {' '.join(words)!r}."
            )
        return words, ranks


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext notebook_launcher`: register %ranks / %%ranks in this kernel."""
    ipython.register_magics(RanksMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext notebook_launcher`: stop the ranks this kernel started."""
    magics = ipython.magics_manager.registry.get("RanksMagics")
    if magics is not None and magics.ranks is not None:
        magics.ranks.stop()
