"""The kernel's side of a local run: the select loop over the workers' pipes (supervisor), the
worker processes as OS processes, what they send (inbox), their stacks and memory, the watchers
(stall, hang_report, rendezvous_watch), the on-demand store, fork safety and the spawn payload.
launch/, clusters/ and interactive/ import it.

`__all__` names the modules this room offers to rooms outside launch/ (tests/test_architecture.py
holds clusters/, interactive/ and widgets/ to them)."""

__all__ = ["supervisor", "processes", "inbox", "payload", "forksafety", "hang_report"]
