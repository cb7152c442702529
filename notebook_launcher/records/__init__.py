"""What a worker leaves for its launcher to read, in a form both sides share: torch-free, stdlib
only, so the kernel's side reads a rank's record without importing the runtime or torch.

names.py      every name and number launchers and workers agree on (addresses, the default port,
              each environment variable of ours): the one place they are written
activity.py   which collective (or the rendezvous) a rank is in, and how many it entered: one
              fixed-size record in a shared page (the worker writes it, the supervisor's watchers
              and the hang report read it)

Imports: nothing of the package. Imported by runtime (the writer) and launch, clusters (the readers);
names.py by every room.
"""
