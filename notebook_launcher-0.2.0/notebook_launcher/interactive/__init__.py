"""Interactive distributed cells: `Ranks`, a group of processes with their process group up that
keep per-rank namespaces between calls, and the `%ranks` / `%%ranks` IPython magics over it.

Kernel side: ranks.py (the public class), group.py (processes, pipes, waiting, interrupts),
outcome.py (what a failed cell raises), magic.py (the magics). Rank side: rank_process.py (the
command loop) and execution.py (running a cell's code). protocol.py is what both sides say.

Imports: launch (planning, the worker bootstrap, channel, events, output) and config; the runtime
only inside rank processes; IPython only in magic.py. Imported by the public face only.
"""

from .outcome import CellInterrupted, RankError, RanksBroken, RanksError, RanksStartError
from .ranks import Ranks

__all__ = ["CellInterrupted", "RankError", "Ranks", "RanksBroken", "RanksError", "RanksStartError"]
