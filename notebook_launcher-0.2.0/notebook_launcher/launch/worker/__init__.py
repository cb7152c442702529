"""The side that runs in the child: the first code in each worker (entry), its message pipe to
the kernel (channel), a failure's frames as data (frames), the spawn payload, host-side pickling,
the memory sampler, fork checks."""
