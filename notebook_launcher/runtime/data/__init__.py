"""Data loaders inside a worker: which indices each rank reads (index_plan.py, pure), the prepared
DataLoader that follows that plan (loader.py), main-process reading (dispatch.py) and the shared
GradientState (gradient_state.py)."""

from .gradient_state import GradientState
from .index_plan import ShardPlan, plan_epoch
from .loader import DataLoaderShard

__all__ = ["DataLoaderShard", "GradientState", "ShardPlan", "plan_epoch"]
