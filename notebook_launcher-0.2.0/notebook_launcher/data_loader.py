"""`accelerate.data_loader`'s names: `from notebook_launcher.data_loader import prepare_data_loader,
SeedableRandomSampler, ...`. A thin, lazy face over runtime/data/ (torch loads on first use); names we
do not support raise an ImportError saying what to use instead."""

from __future__ import annotations

from ._lazy import face

_DATA = "notebook_launcher.runtime.data"
_LAZY = {
    **dict.fromkeys(
        (
            "BatchSamplerShard",
            "DataLoaderShard",
            "SeedableRandomSampler",
            "prepare_data_loader",
        ),
        _DATA,
    ),
    "GradientState": _DATA,
    "skip_first_batches": "notebook_launcher.runtime",
    "AcceleratorState": "notebook_launcher.runtime",
    "PartialState": "notebook_launcher.runtime",
    "DistributedType": "notebook_launcher.config.enums",
    "RNGType": "notebook_launcher.runtime",
    "synchronize_rng_states": "notebook_launcher.runtime",
    "send_to_device": "notebook_launcher.runtime.ops",
}
_OURS = "a prepared loader does this itself (runtime/data/)"
_UNSUPPORTED = {
    "IterableDatasetShard": f"{_OURS}: an IterableDataset is read by rank 0 and dispatched, or read on "
    "every rank with dispatch_batches=False, each keeping its share",
    "DataLoaderDispatcher": f"{_OURS}: dispatch_batches=True in DataLoaderConfiguration",
    "SkipBatchSampler": "use skip_first_batches(loader, num_batches)",
    "SkipDataLoader": "use skip_first_batches(loader, num_batches)",
    "DataLoaderAdapter": f"{_OURS}; torchdata's StatefulDataLoader is not needed (positions are always saved)",
    "DataLoaderStateMixin": f"{_OURS}: end_of_dataloader and remainder are on DataLoaderShard",
    "get_sampler": "read prepared_loader.batch_sampler.batch_sampler.sampler",
    "MpDeviceLoaderWrapper": "TPUs are not supported",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = face(__name__, globals(), _LAZY, _UNSUPPORTED)
