"""Above the supervisor: what happens to a whole run when it goes wrong — restarts with a fresh
rendezvous (restarts.py, which drives supervise/) and the launcher's own signals passed to the ranks
(launcher_signals.py). Used by notebook.py and handle.py.

`__all__` names the modules this room offers to rooms outside launch/: none."""

__all__: list[str] = []
