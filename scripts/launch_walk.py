"""The house walk of issue 34: every distinct kernel-side call site where a frame of launch/ calls
into another room of the package, during one notebook_launch(fn, num_processes=2) after a first
launch, in a process that imported torch (a training notebook's kernel). Prints the count per room
and each site.

    python scripts/launch_walk.py
"""

import collections
import os
import sys
import threading

import torch  # noqa: F401  (a training notebook's kernel)

from notebook_launcher import notebook_launch


def fn():
    return 1


def room(filename):
    if "notebook_launcher/" not in filename:
        return None
    rel = filename.split("notebook_launcher/", 1)[1]
    return rel.split("/")[0].removesuffix(".py")


notebook_launch(fn, num_processes=2, quiet=True)
sites = collections.Counter()
main = os.getpid()


def prof(frame, event, arg):
    if event != "call" or os.getpid() != main:
        return
    callee = room(frame.f_code.co_filename)
    caller = frame.f_back
    if caller is None or callee is None:
        return
    r = room(caller.f_code.co_filename)
    if r == "launch" and callee != "launch":
        sites[
            (
                caller.f_code.co_filename.split("notebook_launcher/")[1],
                caller.f_lineno,
                callee,
                frame.f_code.co_name,
            )
        ] += 1


sys.setprofile(prof)
threading.setprofile(prof)
notebook_launch(fn, num_processes=2, quiet=True)
sys.setprofile(None)
threading.setprofile(None)
rooms = collections.Counter(k[2] for k in sites)
print(len(sites), dict(rooms))
for k in sorted(sites):
    print(k)
