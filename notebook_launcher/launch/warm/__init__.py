"""Starting fast: what the kernel imports once (warmup, preload) and the warm pool (a forkserver
with torch loaded, standby workers forked ahead: worker/standby.py).

`__all__` names the modules this room offers to rooms outside launch/."""

__all__ = ["warmup", "pool"]
