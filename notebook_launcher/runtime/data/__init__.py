"""Data loaders inside a worker: which indices each rank reads (index_plan.py, pure) and the
prepared DataLoader that follows that plan (loader.py)."""

from .index_plan import ShardPlan, plan_epoch
from .loader import DataLoaderShard, GradientState

__all__ = ["DataLoaderShard", "GradientState", "ShardPlan", "plan_epoch"]
