"""Data loaders inside a worker: which indices each rank reads (index_plan.py, pure), which items of
a stream each rank keeps (stream_plan.py, pure), the prepared DataLoader that follows those plans
(loader.py; streams read by stream_reader.py; where its order comes from: samplers.py;
Accelerate's prepare_data_loader: prepare.py), main-process reading (dispatch.py) and the shared
GradientState (gradient_state.py)."""

from .gradient_state import GradientState
from .index_plan import ShardPlan, plan_epoch
from .loader import DataLoaderShard
from .prepare import prepare_data_loader
from .samplers import BatchSamplerShard, SeedableRandomSampler
from .stream_plan import StreamStep, shard_stream, steps_in_stream

__all__ = [
    "BatchSamplerShard",
    "DataLoaderShard",
    "SeedableRandomSampler",
    "prepare_data_loader",
    "GradientState",
    "ShardPlan",
    "StreamStep",
    "plan_epoch",
    "shard_stream",
    "steps_in_stream",
]
