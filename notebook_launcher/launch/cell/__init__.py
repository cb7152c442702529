"""What the cell shows of a run: the printer ([rankN] lines coalesced, a bounded share per rank,
live \r lines, bars, displays: output.py), where it draws (surface.py), the ranks' progress bars
(progress_view.py), the checkpoint being written and the last complete one (checkpoint_view.py), each rank's full log (rank_logs.py), and how errors read (rendering.py,
traceback_view.py, colour.py). Used by notebook.py, clusters/ and interactive/.

`__all__` names the modules this room offers to rooms outside launch/ (tests/test_architecture.py
holds clusters/, interactive/ and widgets/ to them)."""

__all__ = ["output", "rendering", "traceback_view", "progress_view", "checkpoint_view"]
