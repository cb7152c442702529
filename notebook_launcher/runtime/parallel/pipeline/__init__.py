"""Pipeline parallelism on the mesh's "pp" dim: cut.py decides where a chain of blocks is cut and
builds the stage modules from its own blocks; model.py is the prepared model (`step` runs torch's
schedule); strategy.py composes the stages with tensor parallel and FSDP2. Imported by the runtime only."""
