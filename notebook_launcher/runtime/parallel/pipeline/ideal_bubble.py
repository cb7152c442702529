"""A schedule's ideal bubble, found by running its action lists on a clock of unit blocks.

The ideal is the idle share of the pipeline when only the schedule's order and its dependencies
cost time: every forward (F), backward-input (I) and backward-weight (W) block takes one unit, a
full backward (B, input and weight in one) two, torch's overlapped forward+backward (DualPipeV's
OVERLAP_F_B, which torch runs as its parts one after the other) the sum of its parts, and
transfers are free. Each rank runs its list in order; a block starts when its rank is free and
what it needs is done (F of stage s after F of stage s - 1, the same micro-batch; I or B of stage
s after the I or B of stage s + 1 and its own F; W after its own I). The bubble is
1 - (busy units of all ranks) / (ranks x the makespan). For GPipe and 1F1B this is
(p - 1)/(m + p - 1), for looped_bfs and interleaved_1f1b (p - 1)/(vm + p - 1); for the zero-bubble
schedules (interleaved_zero_bubble, zbv_zero_bubble, dualpipev) torch's own action lists give
(p - 1)/(6m + p - 1) once m >= 2p (tests/test_pipeline.py), not the generic formula.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

_UNITS = {"F": 1, "I": 1, "W": 1, "B": 2}
Block = tuple[str, int, int]  # (kind F/I/W/B, stage, micro-batch)


def blocks_of(actions: Iterable[Any]) -> list[Block]:
    """A rank's compute blocks from torch's actions (None, transfers and grad reductions take no
    time; an overlapped pair is its parts in order)."""
    blocks: list[Block] = []
    for action in actions:
        if action is None:
            continue
        kind = getattr(action.computation_type, "value", str(action.computation_type))
        if getattr(action, "sub_actions", None):
            blocks.extend(blocks_of(action.sub_actions))
        elif kind in _UNITS:
            blocks.append((kind, int(action.stage_index), int(action.microbatch_index)))
    return blocks


def simulated_bubble(order: Mapping[int, Iterable[Any]]) -> float:
    """The idle share of `order` (rank -> torch's actions for that rank) on the unit clock."""
    lists = {rank: blocks_of(actions) for rank, actions in order.items()}
    last_stage = max((stage for blocks in lists.values() for _, stage, _ in blocks), default=0)
    done: dict[Block, int] = {}  # block -> the unit it ends at
    clock = dict.fromkeys(lists, 0)
    position = dict.fromkeys(lists, 0)
    while any(position[rank] < len(blocks) for rank, blocks in lists.items()):
        progressed = False
        for rank, blocks in lists.items():
            while position[rank] < len(blocks):
                block = blocks[position[rank]]
                needs = _needs(block, last_stage)
                if any(need not in done for need in needs):
                    break
                start = max([clock[rank], *(done[need] for need in needs)])
                clock[rank] = done[block] = start + _UNITS[block[0]]
                if block[0] == "B":  # its input gradient is what the stage before waits for
                    done["I", block[1], block[2]] = clock[rank]
                position[rank] += 1
                progressed = True
        if not progressed:
            stuck = {
                rank: blocks[position[rank]] for rank, blocks in lists.items() if position[rank] < len(blocks)
            }
            raise ValueError(f"the schedule's actions wait on each other (each rank's next block: {stuck})")
    makespan = max(clock.values(), default=0)
    busy = sum(_UNITS[kind] for blocks in lists.values() for kind, _, _ in blocks)
    return 1.0 - busy / (len(lists) * makespan) if makespan else 0.0


def _needs(block: Block, last_stage: int) -> list[Block]:
    """The blocks that must be done before `block` starts (a full backward B counts as an I)."""
    kind, stage, micro = block
    if kind == "F":
        return [("F", stage - 1, micro)] if stage > 0 else []
    if kind == "W":
        return [("I", stage, micro)]
    needs: list[Block] = [("F", stage, micro)]
    if stage < last_stage:
        needs.append(("I", stage + 1, micro))
    return needs
