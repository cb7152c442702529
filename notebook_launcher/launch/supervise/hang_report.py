"""The hang report: where each rank is, which collective it is in, and a verdict naming the culprit.

Built from two pieces of evidence per rank: its Python stack (faulthandler, stacks.py) and its
activity record (records/activity.py, kept by runtime/world/collective_log.py: which
torch.distributed collective it is in, and how many it has entered). The verdict tells apart the
four ways a run stands still:

- one rank missing from a collective the others wait in ("rank 1 never reached all_reduce #57");
- ranks in different collectives (a mismatch: all_reduce #5 on one rank, broadcast #5 on another);
- a rank stuck before its first collective (the rendezvous, init_process_group);
- no rank in a collective: every rank busy in its own code (a slow step, not a hang).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...records.activity import Activity

MISSING, MISMATCH, ALL_IN_ONE, RENDEZVOUS, BUSY = "missing", "mismatch", "all_in_one", "rendezvous", "busy"
_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>.+)$')
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")
_LIBRARY_MARKS = ("/site-packages/", "/dist-packages/", "/notebook_launcher/", "<frozen ", "/lib/python3")


@dataclass(frozen=True)
class RankState:
    """One rank when the report was made."""

    rank: int
    activity: Activity | None  # None: no record (not started yet, or torch never imported)
    stack: str  # readable stack dump (all threads), "" when none arrived
    exited: bool = False

    @property
    def where(self) -> str:
        """The innermost frame of the user's code in the main thread, e.g. `__getitem__ (data.py:12)`."""
        frames = [m for m in map(_FRAME.match, _main_thread(self.stack).splitlines()) if m]
        user = next((m for m in frames if _is_user_file(m["file"])), frames[0] if frames else None)
        if user is None:
            return "an unknown place (no stack arrived)"
        return f"{user['func']} ({user['file'].rsplit('/', 1)[-1]}:{user['line']})"

    def collective(self) -> str | None:
        """`all_reduce #57` when the rank is in a counted collective."""
        act = self.activity
        return f"{act.op} #{act.count}" if act is not None and act.in_collective else None

    def torch_call(self) -> str | None:
        """Where torch syncs ranks, from the main thread's stack, for collectives the record does not
        count (DDP's C++ reducer, a `from torch.distributed import ...` name, an async op's wait)."""
        for match in map(_FRAME.match, _main_thread(self.stack).splitlines()):
            if match is None:
                continue
            if "/torch/distributed/" in match["file"]:
                return f"torch.distributed's {match['func']}"
            if "/torch/nn/parallel/distributed.py" in match["file"]:
                return f"DDP's {match['func']}"
            if "/torch/autograd/" in match["file"]:
                return "backward (where DDP all-reduces the gradients)"
        return None


@dataclass(frozen=True)
class HangReport:
    """What the launcher found: `verdict` (one line), `kind`, each rank's state; str() is the full text."""

    # "stall" (no progress for stall_timeout), "timeout", "asked" (handle.stacks()), or "rendezvous"
    # (every rank of a one-machine launch inside init_process_group for too long: rendezvous_watch.py)
    reason: str
    kind: str
    verdict: str
    ranks: tuple[RankState, ...]
    idle_seconds: float  # since the last progress of any rank
    made_at: float = field(default_factory=time.time)

    @property
    def stacks(self) -> dict[int, str]:
        return {state.rank: state.stack for state in self.ranks}

    def text(self) -> str:
        head = {
            "stall": f"Hang report: no rank made progress for {_seconds(self.idle_seconds)} (the run keeps running).",
            "timeout": "Hang report at the timeout:",
            "asked": f"Stack report (last progress {_seconds(self.idle_seconds)} ago):",
            "rendezvous": "Hang report: the process group did not form.",
        }[self.reason]
        lines = [head, f"Verdict: {self.verdict}"]
        for state in self.ranks:
            lines.append(f"--- rank {state.rank}: {_status(state, self.made_at)} ---")
            lines.append(user_frames_first(state.stack) or "(no stack arrived)")
        return "\n".join(lines)

    __str__ = text

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython shows the text, not a dataclass repr
        printer.text(self.text())


def make_report(
    reason: str, ranks: list[RankState], idle_seconds: float, now: float | None = None
) -> HangReport:
    now = time.time() if now is None else now
    kind, verdict = judge(ranks, now)
    return HangReport(reason, kind, verdict, tuple(ranks), idle_seconds, now)


def judge(ranks: list[RankState], now: float) -> tuple[str, str]:
    """(kind, verdict line) for the ranks as they stand."""
    running = [r for r in ranks if not r.exited]
    joining = [r for r in running if r.activity is not None and r.activity.in_rendezvous]
    if joining:
        absent = [r for r in running if r not in joining]
        waited = _seconds(now - _earliest_entry(joining))
        if not absent:
            return RENDEZVOUS, (
                f"{_ranks(joining)} {_verb(joining)} in the rendezvous (init_process_group) for {waited}: "
                "a rank on another machine has not joined, or the address/port is unreachable"
            )
        return RENDEZVOUS, (
            f"{_ranks(absent)} never joined the rendezvous (init_process_group), which {_ranks(joining)} "
            f"{_verb(joining, 'has', 'have')} waited in for {waited}; {_whereabouts(absent)}"
        )
    inside = [r for r in running if r.collective() is not None]
    groups: dict[str, list[RankState]] = {}
    for state in inside:
        groups.setdefault(state.collective() or "", []).append(state)
    if len(groups) > 1:
        parts = [f"{_ranks(members)} in {name}" for name, members in groups.items()]
        return MISMATCH, "ranks are in different collectives: " + "; ".join(parts)
    if groups:
        ((name, members),) = groups.items()
        waited = _seconds(now - _earliest_entry(members))
        absent = [r for r in running if r not in members]
        if not absent:
            return ALL_IN_ONE, (
                f"every rank is in {name} for {waited} and it does not complete: a peer outside this "
                "launch, a subgroup used by some ranks only, or the network"
            )
        verb = _verb(members, "has", "have")
        return MISSING, (
            f"{_ranks(absent)} never reached {name}, which {_ranks(members)} {verb} waited in for {waited}; "
            f"{_whereabouts(absent)}"
        )
    torch_calls = [(r, r.torch_call()) for r in running if r.torch_call()]
    if torch_calls:
        waiting = [r for r, _ in torch_calls]
        sites = "; ".join(f"rank {r.rank} in {call}" for r, call in torch_calls)
        others = [r for r in running if r not in waiting]
        if not others:
            return ALL_IN_ONE, (
                f"every rank is in torch's synchronising code ({sites}, from the stack): a collective "
                "that does not complete, or a slow step"
            )
        return MISSING, (
            f"{_ranks(others)} never reached the collective that {_ranks(waiting)} "
            f"{_verb(waiting, 'waits', 'wait')} in ({sites}, from the stack); {_whereabouts(others)}"
        )
    return BUSY, (
        "no rank is in a collective: every rank is busy in its own code (a slow step, not a hang); "
        f"{_whereabouts(running)}"
    )


def _earliest_entry(states: list[RankState]) -> float:
    """When the first of these ranks entered what they wait in (each of them has a record)."""
    return min(state.activity.since for state in states if state.activity is not None)


def _status(state: RankState, now: float) -> str:
    if state.exited:
        return "exited"
    act = state.activity
    if act is not None and act.in_rendezvous:
        return "in the rendezvous (init_process_group)"
    name = state.collective()
    if name and act is not None:  # a collective's name comes only from an activity record
        return f"in {name} for {_seconds(now - act.since)}"
    done = f", after {act.count} collectives" if act is not None else ""
    return f"at {state.where}{done}"


def _whereabouts(states: list[RankState]) -> str:
    return "; ".join(f"rank {s.rank} is at {s.where}" for s in states)


def _ranks(states: list[RankState]) -> str:
    numbers = [str(s.rank) for s in states]
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(numbers)


def _verb(states: list[RankState], one: str = "waits", many: str = "wait") -> str:
    return one if len(states) == 1 else many


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.0f} s" if value >= 10 else f"{max(value, 0.0):.1f} s"


def _is_user_file(path: str) -> bool:
    return not any(mark in path for mark in _LIBRARY_MARKS)


def _threads(stack: str) -> list[list[str]]:
    threads: list[list[str]] = []
    for line in stack.splitlines():
        if _THREAD.match(line) or not threads:
            threads.append([])
        if line.strip():
            threads[-1].append(line)
    return [t for t in threads if t]


def _main_thread(stack: str) -> str:
    """The thread that took the signal (the main thread: Python runs signal handlers there)."""
    threads = _threads(stack)
    current = next((t for t in threads if t[0].startswith("Current thread")), threads[0] if threads else [])
    return "\n".join(current)


def user_frames_first(stack: str) -> str:
    """Threads with the user's frames first (the main thread leads); in each, runs of library frames
    folded to one line, except the innermost frame (what the thread is blocked in)."""
    threads = _threads(stack)
    threads.sort(key=lambda t: (not t[0].startswith("Current thread"), not _has_user_frame(t)))
    return "\n".join("\n".join(_folded(t)) for t in threads)


def _has_user_frame(thread: list[str]) -> bool:
    return any(m and _is_user_file(m["file"]) for m in map(_FRAME.match, thread))


def _folded(thread: list[str]) -> list[str]:
    out: list[str] = []
    folded: list[str] = []
    first_frame = True

    def flush() -> None:
        if folded:
            packages = sorted({_package(path) for path in folded})
            out.append(f"  ... {len(folded)} frame{'s' if len(folded) > 1 else ''} in {', '.join(packages)}")
            folded.clear()

    skipping_source = False
    for line in thread:
        match = _FRAME.match(line)
        if match is None:
            if not skipping_source:
                out.append(line)  # a thread header, or the source line of a frame kept
            continue
        keep = first_frame or _is_user_file(match["file"])
        first_frame = False
        skipping_source = not keep
        if keep:
            flush()
            out.append(line)
        else:
            folded.append(match["file"])
    flush()
    return out


def _package(path: str) -> str:
    for mark in ("/site-packages/", "/dist-packages/"):
        if mark in path:
            return path.split(mark, 1)[1].split("/", 1)[0]
    if "/notebook_launcher/" in path:
        return "notebook_launcher"
    return "the standard library"


def ranks_from(
    ranks: list[int], activities: Mapping[int, Activity | None], stacks: Mapping[int, str], exited: set[int]
) -> list[RankState]:
    return [RankState(r, activities.get(r), stacks.get(r, ""), r in exited) for r in ranks]
