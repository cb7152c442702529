"""`notebook-launcher merge-weights`: a sharded checkpoint written by 2 real processes (FSDP
SHARDED_STATE_DICT, DeepSpeed ZeRO-3) becomes one weights file that loads into the plain model
with exactly the weights the run had (fp32 everywhere, so equality is bitwise)."""

import subprocess

import pytest
import torch
from deepspeed_import import import_deepspeed_or_skip
from safetensors.torch import load_file
from sharded_init_trainers import train_then_save_state
from sharding_trainers import TinyTransformer
from test_cli_helpers import CLI, cli_env

from notebook_launcher import notebook_launch


@pytest.fixture(scope="module", autouse=True)
def fsdp_imported():
    """The FSDP strategy imported once, before this file's first launch, so forked workers inherit it;
    here rather than at import, which every xdist worker's collection would pay (~0.7 s of CPU)."""
    import notebook_launcher.runtime.strategies.fsdp  # noqa: F401


TIMEOUT = 300
FSDP_SHARDED = dict(
    distributed_type="FSDP",
    fsdp_config={
        "fsdp_transformer_layer_cls_to_wrap": "TransformerEncoderLayer",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
    },
)


def merge(tmp_path, *args):
    return subprocess.run(
        [*CLI, "merge-weights", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_env(tmp_path),
    )


def loads_into_plain_model(state: dict, want: dict) -> None:
    model = TinyTransformer()
    model.load_state_dict(state)  # strict: every key, every shape
    got = model.state_dict()
    assert [k for k in want if not torch.equal(got[k], want[k])] == []


@pytest.fixture(scope="module")
def fsdp_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fsdp") / "ckpt"
    weights = notebook_launch(train_then_save_state, args=(str(folder),), num_processes=2, timeout=TIMEOUT,
                              **FSDP_SHARDED)[0]  # fmt: skip
    return folder, weights


def test_fsdp_sharded_checkpoint_merges_into_safetensors(fsdp_checkpoint, tmp_path):
    folder, weights = fsdp_checkpoint
    done = merge(
        tmp_path, folder, tmp_path / "out"
    )  # the save_state folder: its pytorch_model_fsdp_0 is used
    assert done.returncode == 0, done.stderr
    assert "model.safetensors" in done.stdout
    loads_into_plain_model(load_file(tmp_path / "out" / "model.safetensors"), weights)


def test_unsafe_serialization_writes_a_bin_and_the_model_folder_works_too(fsdp_checkpoint, tmp_path):
    folder, weights = fsdp_checkpoint
    done = merge(tmp_path, folder / "pytorch_model_fsdp_0", tmp_path / "out", "--unsafe_serialization")
    assert done.returncode == 0, done.stderr
    loads_into_plain_model(torch.load(tmp_path / "out" / "pytorch_model.bin", weights_only=True), weights)


def test_bad_folders_are_refused_with_what_to_pass(fsdp_checkpoint, tmp_path):
    folder, _ = fsdp_checkpoint
    empty = tmp_path / "empty"
    empty.mkdir()
    for source, says in [
        (empty, "is not a sharded checkpoint"),
        (tmp_path / "missing", "does not exist"),
        (folder / "optimizer_0", "optimizer checkpoint; pass the model's folder"),
    ]:
        done = merge(tmp_path, source, tmp_path / "out")
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_deepspeed_zero3_checkpoint_merges_and_the_folder_can_be_removed(tmp_path):
    import_deepspeed_or_skip()  # forked workers inherit it
    folder = tmp_path / "ckpt"
    zero3 = dict(distributed_type="DEEPSPEED", deepspeed_config={"zero_stage": 3})
    weights = notebook_launch(
        train_then_save_state, args=(str(folder),), num_processes=2, timeout=TIMEOUT, **zero3
    )[0]
    done = merge(tmp_path, folder, tmp_path / "out", "--remove_checkpoint_dir")
    assert done.returncode == 0, done.stderr
    loads_into_plain_model(load_file(tmp_path / "out" / "model.safetensors"), weights)
    assert not folder.exists()
