"""`accelerate.utils`'s names, for code moving over with its imports changed:
`from accelerate.utils import X` becomes `from notebook_launcher.utils import X`.

A thin, lazy face (torch loads on first use). Names we do not support raise an ImportError saying
what to use instead; docs/migrating-from-accelerate.md has the whole table.
"""

from __future__ import annotations

from ._accelerate_utils_names import PROBES
from ._accelerate_utils_names import UNSUPPORTED as _MORE_UNSUPPORTED
from ._lazy import face

_RUNTIME = "notebook_launcher.runtime"
_OPS = "notebook_launcher.runtime.ops"
_UTILITIES = "notebook_launcher.runtime.utilities"

_LAZY = {
    # each name from the room that defines it (importing any of them loads the runtime)
    **dict.fromkeys(
        (
            "KwargsHandler",
            "AutocastKwargs",
            "DistributedDataParallelKwargs",
            "GradScalerKwargs",
            "InitProcessGroupKwargs",
            "ProfileKwargs",
        ),
        f"{_RUNTIME}.accelerator.kwargs",
    ),
    **dict.fromkeys(
        (
            "DeepSpeedPlugin",
            "FullyShardedDataParallelPlugin",
            "TorchDynamoPlugin",
            "DynamoBackend",
            "RNGType",
        ),
        f"{_RUNTIME}.accelerator.plugins",
    ),
    **dict.fromkeys(
        ("DataLoaderConfiguration", "ProjectConfiguration", "GradientAccumulationPlugin"),
        f"{_RUNTIME}.accelerator.configurations",
    ),
    **dict.fromkeys(("DistributedType", "PrecisionType", "LoggerType"), "notebook_launcher.config.enums"),
    **dict.fromkeys(("synchronize_rng_state", "synchronize_rng_states"), f"{_RUNTIME}.world.rng_sync"),
    **dict.fromkeys(
        ("find_executable_batch_size", "release_memory", "should_reduce_batch_size"), f"{_RUNTIME}.memory"
    ),
    "set_seed": f"{_RUNTIME}.world.seed",
    "skip_first_batches": f"{_RUNTIME}.accelerator.control_api",
    **dict.fromkeys(
        (
            "broadcast",
            "broadcast_object_list",
            "concatenate",
            "convert_to_fp32",
            "gather",
            "gather_object",
            "pad_across_processes",
            "recursively_apply",
            "reduce",
            "send_to_device",
        ),
        _OPS,
    ),
    **dict.fromkeys(
        (
            "clear_environment",
            "extract_model_from_parallel",
            "is_bf16_available",
            "is_cuda_available",
            "is_deepspeed_available",
            "is_torchao_available",
            "patch_environment",
            "wait_for_everyone",
        ),
        _UTILITIES,
    ),
    **dict.fromkeys(PROBES, "notebook_launcher.runtime.probes"),
    "copy_tensor_to_devices": _OPS,
    "DistributedOperationException": "notebook_launcher.errors",
    **dict.fromkeys(
        ("ParallelismConfig", "TorchTensorParallelConfig", "TorchContextParallelConfig"),
        "notebook_launcher.config.parallelism",
    ),
    "TorchPipelineParallelConfig": "notebook_launcher.config.pipeline",  # ours: Accelerate has no pp axis
    "write_basic_config": "notebook_launcher.config.basic_config",
    "DDPCommunicationHookType": "notebook_launcher.config.enums",
}

_BIG_MODEL = (
    "big-model inference (device maps, offloading) is not supported; load with transformers' device_map"
)
_UNSUPPORTED = {
    "MegatronLMPlugin": "Megatron-LM is not supported; use FullyShardedDataParallelPlugin or DeepSpeedPlugin",
    "TorchTensorParallelPlugin": "tensor parallelism is not supported; use FullyShardedDataParallelPlugin",
    "AORecipeKwargs": "fp8 runs through torchao with its default recipe (mixed_precision='fp8')",
    "TERecipeKwargs": "Transformer Engine fp8 is not supported; mixed_precision='fp8' uses torchao",
    "BnbQuantizationConfig": "bitsandbytes quantisation is not supported",
    "load_and_quantize_model": "bitsandbytes quantisation is not supported",
    "DummyOptim": "define the optimizer in Python and pass it to prepare(); a DeepSpeed config's optimizer block is read by the engine",
    "DummyScheduler": "define the scheduler in Python and pass it to prepare()",
    "infer_auto_device_map": _BIG_MODEL,
    "load_checkpoint_in_model": _BIG_MODEL,
    "get_balanced_memory": _BIG_MODEL,
    "get_max_memory": _BIG_MODEL,
    "offload_state_dict": _BIG_MODEL,
    "merge_fsdp_weights": "save with accelerator.save_model() (gathers the full weights) or fsdp_state_dict_type FULL_STATE_DICT",
    "save": "use accelerator.save(obj, path) (writes on the main process only)",
    "load": "use torch.load",
    "tqdm": "use tqdm(..., disable=not accelerator.is_local_main_process)",
    "ComputeEnvironment": "only the local machine (and its cluster launches) is supported; SageMaker is not",
    "SageMakerDistributedType": "SageMaker is not supported",
    "install_xla": "TPUs are not supported",
    **_MORE_UNSUPPORTED,
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = face(__name__, globals(), _LAZY, _UNSUPPORTED)
