"""Starting fast: what the kernel imports once (warmup, preload) and the warm pool (a forkserver
with torch loaded, standby workers forked ahead)."""
