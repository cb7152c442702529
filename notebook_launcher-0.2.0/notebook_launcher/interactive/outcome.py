"""What a %%ranks cell raises in the kernel, and how IPython shows it.

A failed cell shows one line of ours, then each failing rank's own traceback (user frames only:
the ranks cut their command loop's frames), as a notebook_launch failure shows it: IPython's look,
library frames folded (launch/cell/traceback_view.py), every frame in `.full_traceback`. IPython shows
an exception through its `_render_traceback_()` when it has one, so the kernel's own frames do not
bury the ranks' story.
"""

from __future__ import annotations

from typing import Any

from ..errors import NotebookLauncherError
from ..launch.cell.rendering import render as _rendered
from ..launch.cell.traceback_view import fill_source
from ..launch.result import RankFailure

RESTART_HINT = (
    "Run `%ranks restart` (or `ranks.restart()`) to start fresh ranks; their namespaces start empty."
)


class RanksError(NotebookLauncherError, RuntimeError):
    """Base of the errors of a %%ranks group."""


class RankError(RanksError):
    """The code raised on one or more ranks. The ranks are alive and keep their namespaces."""

    def __init__(self, failures: dict[int, RankFailure], finished: list[int]) -> None:
        self.failures = failures
        self.finished = finished
        first = failures[min(failures)]
        self.rank = first.rank
        self.exception = first.exception
        which = ", ".join(str(r) for r in sorted(failures))
        done = f"; rank {', '.join(map(str, finished))} finished" if finished else ""
        super().__init__(
            f"rank {which} raised {first.exc_type}: {first.message}{done}. The ranks are still running "
            "with their namespaces: fix the code and run the cell again."
        )
        if first.exception is not None:
            self.__cause__ = first.exception

    @property
    def full_traceback(self) -> str:
        """Every failing rank's traceback with every frame, plain text (the cell folds libraries')."""
        return "\n".join(f"--- rank {r} ---\n{f.traceback or ''}" for r, f in sorted(self.failures.items()))

    def _render_traceback_(self) -> list[str]:
        sections = [(f"rank {r}", f.shown_traceback() or "") for r, f in sorted(self.failures.items())]
        return _rendered(type(self).__name__, str(self), sections)


class RanksBroken(RanksError):
    """The group cannot run code any more: a rank died, or is stuck in a collective."""

    def __init__(self, why: str, outputs: dict[int, str] | None = None) -> None:
        self.why = why
        self.outputs = outputs or {}
        super().__init__(
            f"The ranks' process group is broken: {why}. The other ranks cannot run collectives with it. "
            + RESTART_HINT
        )

    def _render_traceback_(self) -> list[str]:
        sections = [(f"rank {r}: last output", text) for r, text in sorted(self.outputs.items())]
        return _rendered(type(self).__name__, str(self), sections)


class RanksStartError(RanksError):
    """A rank could not start (its traceback or last output is attached); nothing was left running."""

    def __init__(self, rank: int, exitcode: int | None, text: str) -> None:
        self.rank, self.exitcode, self.text = rank, exitcode, text
        super().__init__(f"rank {rank} could not start its process group; no rank is left running.")

    def _render_traceback_(self) -> list[str]:
        return _rendered(type(self).__name__, str(self), [(f"rank {self.rank}", self.text)])


class CellInterrupted(KeyboardInterrupt):
    """The stop button interrupted a %%ranks cell; `where` holds each rank's traceback at that point."""

    def __init__(self, where: dict[int, str], stuck: list[int]) -> None:
        self.where, self.stuck = where, stuck
        note = (
            f"; rank {', '.join(map(str, stuck))} did not stop (blocked in a collective). {RESTART_HINT}"
            if stuck
            else "; the ranks are ready for the next cell"
        )
        super().__init__(f"interrupted on every rank{note}")

    def _render_traceback_(self) -> list[str]:
        sections = [(f"rank {r}", text) for r, text in sorted(self.where.items())]
        return _rendered("KeyboardInterrupt", str(self.args[0]), sections)


def failure_from_reply(rank: int, error: dict[str, Any]) -> RankFailure:
    """A RankFailure (the launch's record of one rank's error) from a rank's REPLY."""
    from ..launch.worker.channel import rebuild_exception

    return RankFailure(
        rank=rank,
        exc_type=error["exc_type"],
        message=error["message"],
        traceback=fill_source(error["traceback"]),
        time=error["time"],
        exception=rebuild_exception(error),  # None: the traceback text still tells the story
        secondary=error.get("secondary", False),
        frames=error.get("frames"),
    )
