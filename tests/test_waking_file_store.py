"""The one-machine rendezvous file's waits wake when the file is written (system/waking_file_store.py).

torch's FileStore re-reads its file every 10 ms while it waits; a launch waits a few times before
the user's function runs, about 5 ms each (issue 38). Measured here against FileStore itself, in the
same test, over the same file, by a partner process that answers each key it is sent.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import statistics
import time

import pytest
import torch.distributed as dist

from notebook_launcher.system import waking_file_store as module
from notebook_launcher.system.waking_file_store import waking_file_store

ROUND_TRIPS = 30


def _make(kind: str, path: str):
    if kind == "waking":
        return waking_file_store(path, 60)
    store = dist.FileStore(path, -1)
    store.set_timeout(datetime.timedelta(seconds=60))
    return store


def _answer(kind: str, path: str, no_inotify: bool) -> None:
    if no_inotify:
        module._watch = lambda _path: -1  # as where inotify cannot be had
    store = _make(kind, path)
    for i in range(ROUND_TRIPS):
        store.wait([f"ping{i}"])
        store.set(f"pong{i}", "1")


def _round_trips(kind: str, tmp_path, no_inotify: bool = False) -> float:
    """Median seconds from writing a key to seeing the partner's answer (two waits woken)."""
    path = str(tmp_path / f"{kind}-{no_inotify}")
    open(path, "w").close()
    partner = multiprocessing.get_context("fork").Process(target=_answer, args=(kind, path, no_inotify))
    partner.start()
    store = _make(kind, path)
    times = []
    try:
        for i in range(ROUND_TRIPS):
            began = time.perf_counter()
            store.set(f"ping{i}", "1")
            store.wait([f"pong{i}"])
            times.append(time.perf_counter() - began)
    finally:
        partner.join(30)
    assert partner.exitcode == 0
    return statistics.median(times)


def test_a_wait_wakes_on_the_write_not_on_a_poll(tmp_path):
    polled = _round_trips("file", tmp_path)  # the floor: FileStore's own waits, same machine, same moment
    woken = _round_trips("waking", tmp_path)
    print(f"round trip: FileStore {polled * 1000:.2f} ms, waking {woken * 1000:.2f} ms")
    assert woken < polled / 3, (woken, polled)


def test_without_inotify_a_wait_polls_at_a_millisecond(tmp_path):
    polled = _round_trips("file", tmp_path)
    fallback = _round_trips("waking", tmp_path, no_inotify=True)
    assert fallback < polled / 2, (fallback, polled)


def test_without_inotify_a_wait_asks_for_a_watch_once_then_sleeps_between_reads(tmp_path, monkeypatch):
    """Where no watch can be had, the wait sleeps POLL_SECONDS between reads: it asks for a watch
    once per store, and reads the file about once a millisecond, not as fast as it can."""
    asked = []
    monkeypatch.setattr(module, "_watch", lambda path: asked.append(path) or -1)
    path = str(tmp_path / "f")
    open(path, "w").close()
    store = waking_file_store(path, 60)
    reads = []
    check = store._file.check
    monkeypatch.setattr(
        store, "_file", type("Counting", (), {"check": lambda self, keys: reads.append(1) or check(keys)})()
    )
    began = time.monotonic()
    with pytest.raises(dist.DistStoreError):
        store.wait(["never-written"], datetime.timedelta(seconds=0.3))
    waited = time.monotonic() - began
    assert asked == [path]
    assert len(reads) <= waited / module.POLL_SECONDS + 2, (len(reads), waited)


def test_a_key_never_written_times_out_saying_which(tmp_path):
    path = str(tmp_path / "f")
    open(path, "w").close()
    store = waking_file_store(path, 60)
    began = time.monotonic()
    with pytest.raises(dist.DistStoreError, match="never-written"):
        store.wait(["never-written"], datetime.timedelta(seconds=0.3))
    assert time.monotonic() - began >= 0.3


def test_it_reads_and_writes_the_file_as_filestore_does(tmp_path):
    """The same file and format: what one writes the other reads (ranks may mix them)."""
    path = str(tmp_path / "f")
    open(path, "w").close()
    ours, theirs = waking_file_store(path, 60), _make("file", path)
    ours.set("a", "1")
    assert theirs.get("a") == b"1"
    theirs.set("b", b"2")
    assert ours.get("b") == b"2"
    assert ours.add("n", 2) == 2 and theirs.add("n", 1) == 3
    assert ours.compare_set("a", "1", "x") == b"x"
    assert ours.check(["a", "b"]) and not ours.check(["c"])
    assert ours.num_keys() == theirs.num_keys()
    assert ours.delete_key("b") and not theirs.check(["b"])
    assert os.path.getsize(path) > 0


def _group_after_the_store_variable_is_gone(path: str) -> None:
    import gc

    dist.init_process_group("gloo", store=waking_file_store(path, 60), rank=0, world_size=1)
    gc.collect()  # the caller's reference is gone; torch's groups hold only the C++ half
    group = dist.new_group([0])  # a new group's gloo connect calls the store from C++
    dist.barrier(group)
    dist.destroy_process_group()


def test_a_group_made_later_still_reaches_the_store(tmp_path):
    """DeviceMesh's new_group after init_process_group: failed with "Not implemented" from torch's
    trampoline when the Python store had been collected."""
    path = str(tmp_path / "f")
    open(path, "w").close()
    child = multiprocessing.get_context("fork").Process(
        target=_group_after_the_store_variable_is_gone, args=(path,)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0
