"""Model parallelism on a named DeviceMesh (Accelerate's ParallelismConfig): mesh.py builds the mesh
and answers which rank holds what; tensor_parallel.py splits layers (a plan, a transformers model's
own plan, or the user's parallelize_fn); strategy.py composes TP with FSDP2/HSDP over the data
dims (torchtitan's order); api.py is the Accelerator's mesh properties. Imported by the runtime only."""
