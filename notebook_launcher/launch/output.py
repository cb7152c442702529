"""Print workers' output into the calling cell, each line prefixed with its rank (or with torchrun's
log_line_prefix_template, whose fields {role_name}, {rank} and {local_rank} it fills)."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from ..errors import ConfigError
from .events import HangReported, MemoryWarning, OutputLine, RunRestarting, RunStarted

ROLE_NAME = "default"  # torchrun's role for its workers, the value of {role_name}


def check_prefix_template(template: str | None) -> str | None:
    """The template, once it is known to fill with torchrun's fields; an error naming the bad field."""
    if template is None:
        return None
    try:
        str(template).format(role_name=ROLE_NAME, rank=0, local_rank=0)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"log_line_prefix_template={template!r} cannot be filled ({type(exc).__name__}: {exc}); use torchrun's "
            "fields only, e.g. '[{role_name}{rank}|{local_rank}]: '."
        ) from None
    return str(template)


class CellPrinter:
    """Observer that writes `[rank N] line` to this process's stdout/stderr (the cell, in a kernel)."""

    def __init__(
        self,
        show_ranks: int | Iterable[int] | None = None,
        prefix: bool = True,
        template: str | None = None,
    ) -> None:
        if isinstance(show_ranks, int):
            show_ranks = [show_ranks]
        self.show_ranks = None if show_ranks is None else set(show_ranks)
        self.prefix = prefix
        self.template = check_prefix_template(template)
        self.local_ranks: tuple[int, ...] = ()

    def _prefix(self, rank: int) -> str:
        if self.template is None:
            return f"[rank{rank}] "
        local = self.local_ranks.index(rank) if rank in self.local_ranks else rank
        return self.template.format(role_name=ROLE_NAME, rank=rank, local_rank=local)

    def __call__(self, event: object) -> None:
        if isinstance(event, HangReported) and event.report.reason == "stall":
            sys.stderr.write(event.report.text() + "\n")  # a timeout's report comes with LaunchTimeout
            sys.stderr.flush()
            return
        if isinstance(event, RunRestarting):
            sys.stderr.write(f"notebook_launch: {event.text}\n")
            sys.stderr.flush()
            return
        if isinstance(event, MemoryWarning):  # one line, whatever ranks are shown
            sys.stderr.write(f"notebook_launcher: {event.text}\n")
            sys.stderr.flush()
            return
        if isinstance(event, RunStarted):
            self.local_ranks = tuple(event.local_ranks)
            return
        if not isinstance(event, OutputLine):
            return
        if self.show_ranks is not None and event.rank not in self.show_ranks:
            return
        stream = sys.stdout if event.stream == "stdout" else sys.stderr
        text = f"{self._prefix(event.rank)}{event.text}\n" if self.prefix else event.text + "\n"
        stream.write(text)
        stream.flush()
