"""system/signal_delivery.py: a stack dump counts as whole only once the handler writing it has
returned, read from /proc, not because its output went quiet.

CI once reported a timeout whose rank-0 stack was cut after its first frame: the worker, descheduled
in the middle of faulthandler's dump on a loaded machine, had been quiet for longer than the 0.1 s
taken to mean "done". Here the writer is stopped for certain: its dump is larger than the pipe, and
nobody reads the pipe, so faulthandler's handler blocks in write() with most of the dump unwritten.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

from notebook_launcher.system.signal_delivery import SignalDelivery
from notebook_launcher.system.signals import STACK_DUMP_SIGNAL

# 40 threads, each 90 frames deep, then the main thread at the bottom of the dump: well over a
# pipe's 64 KiB. The main thread's innermost frame is `main_thread_marker`.
CHILD = """
import faulthandler, os, sys, threading, time
faulthandler.register(int(sys.argv[1]), file=sys.stderr, all_threads=True, chain=False)
def deep(n):
    if n == 0:
        time.sleep(600)
        return
    deep(n - 1)
for _ in range(40):
    threading.Thread(target=deep, args=(90,), daemon=True).start()
def main_thread_marker():
    os.write(1, b"ready\\n")
    time.sleep(600)
main_thread_marker()
"""


def _read_available(fd: int) -> bytes:
    data = b""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_dump_blocked_mid_write_is_not_handled_until_it_has_all_been_written():
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(STACK_DUMP_SIGNAL)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.readline() == b"ready\n"
        delivery = SignalDelivery(child.pid, STACK_DUMP_SIGNAL)
        assert delivery.handled() is True  # nothing sent yet: nothing pending, nothing running
        os.kill(child.pid, STACK_DUMP_SIGNAL)
        time.sleep(1.0)  # the pipe fills and the handler waits in write(): quiet, and not done
        assert delivery.handled() is False
        dump = b""
        deadline = time.monotonic() + 60
        while not delivery.handled():
            assert time.monotonic() < deadline, f"the handler never returned; read {len(dump)} bytes"
            dump += _read_available(child.stderr.fileno())
            time.sleep(0.01)
        dump += _read_available(child.stderr.fileno())
        assert len(dump) > 65536
        text = dump.decode()
        assert text.count("(most recent call first):") == 41  # every thread, the main one last
        assert "in main_thread_marker" in text.rsplit("(most recent call first):", 1)[1]
    finally:
        child.kill()
        child.wait(10)


def test_it_cannot_tell_for_a_process_that_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    assert SignalDelivery(child.pid, signal.SIGTERM).handled() is None
    assert SignalDelivery(None, signal.SIGTERM).handled() is None
