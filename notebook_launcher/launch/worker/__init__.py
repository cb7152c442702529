"""The side that runs in the child: the first code in each worker (entry), a warm-pool worker
(standby), its message pipe to the kernel (channel, host_pickle), a failure's frames as data
(frames), the memory sampler, and what the worker shows (relay, display_relay, progress_relay,
detach). Imports none of launch's other rooms.

`__all__` names the modules this room offers to rooms outside launch/ (tests/test_architecture.py
holds clusters/, interactive/ and widgets/ to them)."""

__all__ = ["entry", "standby", "channel", "host_pickle", "relay"]
