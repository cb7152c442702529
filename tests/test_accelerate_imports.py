"""Accelerate's import paths and names, its notebook_launcher(), the constructor's old and new
arguments, and find_executable_batch_size's semantics."""

import json
import os
import warnings

import pytest
import torch
from fresh_python import last_line

from notebook_launcher import Accelerator, AcceleratorError, ConfigError
from notebook_launcher.runtime import reset_state

ISSUE_NAMES = {
    "notebook_launcher": [
        "Accelerator",
        "PartialState",
        "notebook_launcher",
        "skip_first_batches",
        "find_executable_batch_size",
        "DataLoaderConfiguration",
        "DeepSpeedPlugin",
        "FullyShardedDataParallelPlugin",
        "ProfileKwargs",
        "DistributedType",
    ],
    "notebook_launcher.utils": [
        "DataLoaderConfiguration",
        "ProjectConfiguration",
        "GradientAccumulationPlugin",
        "DistributedDataParallelKwargs",
        "InitProcessGroupKwargs",
        "GradScalerKwargs",
        "AutocastKwargs",
        "ProfileKwargs",
        "FullyShardedDataParallelPlugin",
        "DeepSpeedPlugin",
        "DistributedType",
        "PrecisionType",
        "set_seed",
        "find_executable_batch_size",
        "skip_first_batches",
        "gather",
        "gather_object",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "pad_across_processes",
        "send_to_device",
        "release_memory",
        "wait_for_everyone",
    ],
    "notebook_launcher.state": ["PartialState", "AcceleratorState", "GradientState"],
}


@pytest.fixture(autouse=True)
def fresh_state():
    reset_state()
    yield
    reset_state()


@pytest.mark.parametrize("module", sorted(ISSUE_NAMES))
def test_the_names_accelerate_users_import(module):
    imported = __import__(module, fromlist=["*"])
    for name in ISSUE_NAMES[module]:
        assert getattr(imported, name) is not None, (module, name)
    assert sorted(set(ISSUE_NAMES[module]) - set(dir(imported))) == [] or module == "notebook_launcher"


@pytest.mark.parametrize(
    "statement, advice",
    [
        ("from notebook_launcher import dispatch_model", "big-model inference"),
        (
            "from notebook_launcher.utils import MegatronLMPlugin",
            "use FullyShardedDataParallelPlugin or DeepSpeedPlugin",
        ),
        ("from notebook_launcher.utils import merge_fsdp_weights", "accelerator.save_model()"),
        ("import notebook_launcher.utils as u; u.DummyOptim", "define the optimizer in Python"),
    ],
)
def test_a_name_we_do_not_support_says_so_and_what_to_use(statement, advice):
    with pytest.raises(ImportError) as caught:
        exec(statement, {})
    assert "does not support" in str(caught.value) and advice in str(caught.value)


def test_an_unknown_name_is_a_plain_attribute_error():
    import notebook_launcher.utils as utils

    assert not hasattr(utils, "no_such_thing")


def test_the_notebook_launcher_function_does_not_shadow_submodules():
    code = (
        "import sys\n"
        "from notebook_launcher import notebook_launcher\n"
        "assert callable(notebook_launcher)\n"
        "import notebook_launcher.resolution, notebook_launcher.utils, notebook_launcher.state\n"
        "import notebook_launcher as package\n"
        "assert package.notebook_launcher is notebook_launcher.notebook_launcher\n"
        "assert callable(package.notebook_launcher) and package.resolution.layered_config\n"
        "print('torch' in sys.modules)\n"
    )
    last_line(code)
    lazy = "import sys, notebook_launcher, notebook_launcher.utils, notebook_launcher.state\nprint('torch' in sys.modules)"
    assert last_line(lazy) == "False"


def _ranks_and_precision(offset):
    from notebook_launcher import Accelerator

    acc = Accelerator()
    return {"rank": acc.process_index + offset, "precision": acc.mixed_precision, "world": acc.num_processes}


def test_accelerates_notebook_launcher_runs_on_our_launcher():
    from notebook_launcher import notebook_launcher

    first = notebook_launcher(_ranks_and_precision, args=(10,), num_processes=2, mixed_precision="bf16")
    again = notebook_launcher(_ranks_and_precision, args=(20,), num_processes=2)  # default use_port: no clash
    assert [first[0], first[1]] == [
        {"rank": 10, "precision": "bf16", "world": 2},
        {"rank": 11, "precision": "bf16", "world": 2},
    ]
    assert again[1]["rank"] == 21 and again[1]["precision"] == "no"
    with pytest.raises(ConfigError, match="rdzv_backend='etcd'"):
        notebook_launcher(_ranks_and_precision, args=(0,), num_processes=2, rdzv_backend="etcd")
    restartable = notebook_launcher(_ranks_and_precision, args=(0,), num_processes=2, max_restarts=2)
    assert restartable.restarts == 0 and restartable[1]["rank"] == 1


def test_debug_launcher_runs_on_cpu():
    from notebook_launcher import debug_launcher

    result = debug_launcher(_ranks_and_precision, args=(0,))
    assert [result[0]["world"], result[1]["rank"]] == [2, 1]


# ------------------------------------------------------------------------------------ constructor
def test_removed_keyword_arguments_name_their_replacement():
    with pytest.raises(TypeError, match=r"even_batches.*DataLoaderConfiguration\(even_batches=\.\.\.\)"):
        Accelerator(even_batches=False)
    with pytest.raises(TypeError, match=r"logging_dir.*ProjectConfiguration"):
        Accelerator(logging_dir="logs")
    with pytest.raises(TypeError, match="Did you mean 'mixed_precision'"):
        Accelerator(mixed_precison="bf16")


def test_split_batches_on_the_accelerator_still_works_with_a_future_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc = Accelerator(split_batches=True)
    assert acc.split_batches is True
    assert any(
        issubclass(w.category, FutureWarning) and "DataLoaderConfiguration" in str(w.message) for w in caught
    )


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (
            {"gradient_accumulation_steps": 2, "gradient_accumulation_plugin": "plugin"},
            ConfigError,
            "pass one",
        ),
        ({"dynamo_backend": "eager", "dynamo_plugin": "plugin"}, ConfigError, "pass one"),
        ({"dynamo_backend": "magic"}, ConfigError, "dynamo backend"),
        ({"torch_tp_plugin": object()}, AcceleratorError, "tensor parallelism is not supported"),
        ({"rng_types": ["xla"]}, AcceleratorError, "rng_types contains 'xla'"),
        ({"dataloader_config": {"split_batches": True}}, ConfigError, "must be a DataLoaderConfiguration"),
    ],
)
def test_constructor_mistakes_are_named(kwargs, error, text):
    from notebook_launcher.utils import GradientAccumulationPlugin, TorchDynamoPlugin

    if kwargs.get("gradient_accumulation_plugin") == "plugin":
        kwargs["gradient_accumulation_plugin"] = GradientAccumulationPlugin(num_steps=2)
    if kwargs.get("dynamo_plugin") == "plugin":
        kwargs["dynamo_plugin"] = TorchDynamoPlugin(backend="eager")
    with pytest.raises(error, match=text):
        Accelerator(**kwargs)


def test_accelerates_own_configuration_objects_are_accepted():
    from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin, ProjectConfiguration

    acc = Accelerator(
        dataloader_config=DataLoaderConfiguration(even_batches=False),
        project_config=ProjectConfiguration(project_dir="somewhere", total_limit=3),
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=4),
    )
    assert (acc.even_batches, acc.project_dir, acc.gradient_accumulation_steps) == (False, "somewhere", 4)
    assert acc.project_configuration.total_limit == 3 and acc.logging_dir == "somewhere"


def test_deepspeed_plugin_maps_onto_the_deepspeed_config(tmp_path):
    from notebook_launcher.runtime.accelerator.settings import _launch_config, _plugins
    from notebook_launcher.utils import DeepSpeedPlugin

    ds_file = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "auto"}}}
    plugin = DeepSpeedPlugin(hf_ds_config=ds_file, zero_stage=3, gradient_clipping=1.0,
                             offload_optimizer_device="cpu", gradient_accumulation_steps="auto")  # fmt: skip
    config = _launch_config(None, None, False, _plugins(None, plugin, None, None))
    assert config.distributed_type == "DEEPSPEED" and config.deepspeed_config.zero_stage == 3
    assert (
        config.deepspeed_config.offload_optimizer_device == "cpu"
        and config.deepspeed_config.gradient_clipping == 1.0
    )
    assert json.loads(open(config.deepspeed_config.deepspeed_config_file).read()) == ds_file


# ------------------------------------------------------------------------- find_executable_batch_size
def test_find_executable_batch_size_follows_accelerate(monkeypatch):
    import notebook_launcher.runtime.memory as memory
    from notebook_launcher.utils import find_executable_batch_size

    collections = []  # gc.collect before the first try and after each out-of-memory error, as Accelerate
    monkeypatch.setattr(memory.gc, "collect", lambda: collections.append(1))
    tried = []

    @find_executable_batch_size(starting_batch_size=128)
    def train(batch_size, scale):
        tried.append(batch_size)
        if batch_size > 100:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if batch_size > 95:
            raise torch.OutOfMemoryError("XPU out of memory. Tried to allocate 1 GiB")
        return batch_size * scale

    assert train(2) == 184 and tried == [128, 115, 103, 92]  # int(x * 0.9) each time
    assert len(collections) == 1 + 3
    assert train(1) == 92 and tried[-1] == 92  # the size that worked is remembered

    @find_executable_batch_size(starting_batch_size=8)
    def broken(batch_size):
        raise RuntimeError("shape mismatch")  # not an out-of-memory error: raised at once

    with pytest.raises(RuntimeError, match="shape mismatch"):
        broken()

    @find_executable_batch_size(starting_batch_size=2)
    def never(batch_size):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")

    with pytest.raises(RuntimeError, match="No executable batch size found, reached zero"):
        never()
    with pytest.raises(TypeError, match="Batch size was passed"):
        train(64, 2)


def test_state_objects_are_shared_like_accelerates():
    from notebook_launcher.state import AcceleratorState, GradientState, PartialState

    acc = Accelerator(gradient_accumulation_steps=3)
    assert GradientState().num_steps == 3 and GradientState() is not acc.gradient_state
    assert AcceleratorState().distributed_type == acc.distributed_type == "NO"
    assert PartialState().num_processes == 1 and PartialState().is_main_process


def test_the_readme_accelerator_example_runs(tmp_path, monkeypatch):
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    code = readme.split("## `Accelerator`", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(code, scope)
    acc = scope["accelerator"]
    assert acc.gradient_accumulation_steps == 4 and acc.project_configuration.total_limit == 2


def test_one_process_gets_the_loaders_batches_unchanged():
    from torch.utils.data import DataLoader
    from trainers import IndexDataset

    acc = Accelerator()
    batches = [b.flatten().long().tolist() for b in acc.prepare(DataLoader(IndexDataset(5), batch_size=2))]
    assert batches == [[0, 1], [2, 3], [4]]  # Accelerate does not shard (or pad) a world of one


def test_patch_environment_upper_cases_and_restores_exactly(monkeypatch):
    from notebook_launcher.utils import patch_environment

    monkeypatch.setenv("NL_KEPT", "before")
    monkeypatch.delenv("NL_ADDED", raising=False)
    with patch_environment(nl_kept=1, nl_added="x"):  # Accelerate upper-cases the names
        assert (os.environ["NL_KEPT"], os.environ["NL_ADDED"]) == ("1", "x")
    assert os.environ["NL_KEPT"] == "before" and "NL_ADDED" not in os.environ
