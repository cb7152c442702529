"""The rest of `accelerate.utils`'s public names, for notebook_launcher.utils's face (torch-free):
the probes and environment helpers we answer (runtime/probes.py), and the names we refuse, each with
what to use instead. Kept apart so utils.py's own table stays short."""

from __future__ import annotations

PROBES = (
    *(
        f"is_{name}_available"
        for name in (
            "aim boto3 clearml comet_ml datasets dvclive lomo matplotlib mlflow pandas peft pynvml pytest rich "
            "schedulefree swanlab tensorboard timm torchdata torchvision trackio transformers triton wandb amdsmi "
            "import_timer torch_xla hpu npu mlu sdaa musa xpu neuron xccl megatron_lm sagemaker "
            "transformer_engine transformer_engine_mxfp8 bnb 4bit_bnb 8bit_bnb bitsandbytes_multi_backend "
            "torchdata_stateful_dataloader mps fp16 fp8 rocm"
        ).split()
    ),
    "is_habana_gaudi1",
    "get_torch_accelerator_backend",
    "str_to_bool",
    "parse_flag_from_env",
    "parse_choice_from_env",
    "get_int_from_env",
)

_MEGATRON = "Megatron-LM is not supported; use FullyShardedDataParallelPlugin or DeepSpeedPlugin"
_BIG_MODEL = (
    "big-model inference (device maps, offloading) is not supported; load with transformers' device_map"
)
_DEEPSPEED = "an internal of Accelerate's DeepSpeed integration; prepare() builds the DeepSpeed engine"
_FSDP = "an internal of Accelerate's FSDP integration; prepare() shards with FSDP2 and save_state/load_state save it"
_LAUNCH = "an internal of `accelerate launch`; use `notebook-launcher launch` or notebook_launch"
_NAMES = "an internal file name of Accelerate's checkpoints; save_state/load_state use the same layout"
_FP8 = "fp8 runs through torchao with mixed_precision='fp8'"
_INTERNAL = "an internal helper of Accelerate"
UNSUPPORTED = {
    **dict.fromkeys(
        "AbstractTrainStep BertTrainStep GPTTrainStep T5TrainStep MegatronLMDummyDataLoader "
        "MegatronLMDummyScheduler add_model_config_to_megatron_parser avg_losses_across_data_parallel_group".split(),
        _MEGATRON,
    ),
    **dict.fromkeys(
        "OffloadedWeightsLoader PrefixedDataset align_module_device calculate_maximum_sizes check_device_map "
        "check_tied_parameters_in_config check_tied_parameters_on_same_device compute_module_sizes "
        "extract_submodules_state_dict find_tied_parameters get_max_layer_size has_offloaded_params "
        "load_offloaded_weight load_offloaded_weights load_state_dict named_module_tensors offload_weight "
        "retie_parameters ensure_weights_retied save_offload_index set_module_tensor_to_device "
        "get_module_children_bottom_up has_4bit_bnb_layers".split(),
        _BIG_MODEL,
    ),
    **dict.fromkeys(
        "DeepSpeedEngineWrapper DeepSpeedOptimizerWrapper DeepSpeedSchedulerWrapper DeepSpeedSequenceParallelConfig "
        "GatheredParameters HfDeepSpeedConfig get_active_deepspeed_plugin map_pytorch_optim_to_deepspeed "
        "deepspeed_required compile_regions_deepspeed".split(),
        _DEEPSPEED,
    ),
    **dict.fromkeys(
        "disable_fsdp_ram_efficient_loading enable_fsdp_ram_efficient_loading fsdp2_apply_ac fsdp2_canonicalize_names "
        "fsdp2_load_full_state_dict fsdp2_prepare_model fsdp2_switch_optimizer_parameters get_fsdp2_grad_scaler "
        "load_fsdp_model load_fsdp_optimizer save_fsdp_model save_fsdp_optimizer model_has_dtensor "
        "compile_regions_fsdp2".split(),
        _FSDP,
    ),
    **dict.fromkeys(
        "PrepareForLaunch TORCH_LAUNCH_PARAMS prepare_deepspeed_cmd_env prepare_multi_gpu_env "
        "prepare_sagemager_args_inputs prepare_simple_launcher_cmd_env prepare_tpu purge_accelerate_environment "
        "convert_dict_to_env_variables set_numa_affinity get_cpu_distributed_information "
        "check_cuda_p2p_ib_support check_os_kernel is_port_in_use get_gpu_info".split(),
        _LAUNCH,
    ),
    **dict.fromkeys(
        "MODEL_NAME OPTIMIZER_NAME PROFILE_PATTERN_NAME RNG_STATE_NAME SAFE_MODEL_NAME SAFE_WEIGHTS_INDEX_NAME "
        "SAFE_WEIGHTS_NAME SAFE_WEIGHTS_PATTERN_NAME SAMPLER_NAME SCALER_NAME SCHEDULER_NAME WEIGHTS_INDEX_NAME "
        "WEIGHTS_NAME WEIGHTS_PATTERN_NAME".split(),
        _NAMES,
    ),
    **dict.fromkeys(
        "apply_fp8_autowrap check_cuda_fp8_capability contextual_fp8_autocast convert_model convert_model_to_fp8_ao "
        "filter_first_and_last_linear_layers has_ao_layers has_transformer_engine_layers torchao_required".split(),
        _FP8,
    ),
    **dict.fromkeys(
        "CannotPadNestedTensorWarning CustomDtype TORCH_DISTRIBUTED_OPERATION_TYPES TensorInformation "
        "are_libraries_initialized clean_state_dict_for_safetensors compare_versions convert_bytes "
        "convert_file_size_to_int convert_outputs_to_fp32 dtype_byte_size find_batch_size find_device "
        "get_accelerator_free_memory get_current_device_type get_data_structure get_distributed_backend "
        "get_grad_scaler get_mixed_precision_context_manager get_model_tp_size get_pretty_name honor_type "
        "id_tensor_storage ignorant_find_batch_size initialize_tensors is_namedtuple is_peft_model "
        "is_tensor_information is_torch_tensor is_torch_version listify merge_dicts normalize_device "
        "pad_input_tensors recursive_getattr slice_tensors is_compiled_module has_compiled_regions".split(),
        _INTERNAL,
    ),
    "compile_regions": "TorchDynamoPlugin(use_regional_compilation=True) compiles each repeated block in prepare()",
}
