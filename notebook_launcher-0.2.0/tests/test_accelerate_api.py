"""Accelerate 1.x's constructor, methods and state objects on 2 real processes (gloo, CPU), each
checked against Accelerate's documented behaviour. Workers live in parity_workers.py; one launch
per group of features (module-scoped), one test per feature."""

import json

import pytest
import torch
from parity_workers import (
    accumulation_features,
    checkpoint_features,
    control_features,
    data_features,
    dynamo_losses,
    fsdp_plugin_step,
    partial_state_alone,
    profile_features,
    save_model_features,
    uneven_with_join,
)

from notebook_launcher import notebook_launch

TIMEOUT = 240


def run(fn, *args, **kwargs):
    return notebook_launch(fn, args=args, num_processes=2, quiet=True, timeout=TIMEOUT, **kwargs)


@pytest.fixture(scope="module")
def data():
    return run(data_features)


@pytest.fixture(scope="module")
def control():
    return run(control_features)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return run(checkpoint_features, str(tmp_path_factory.mktemp("project")))


# ------------------------------------------------------------------------------- dataloader_config
def test_split_batches_comes_from_dataloader_config(data):
    assert data[0]["split_batches"] == [[0, 1], [4, 5]]
    assert data[1]["split_batches"] == [[2, 3], [6, 7]]


def test_even_batches_false_leaves_the_last_round_short(data):
    assert data[0]["uneven"] == [[0, 1, 2, 3], [8, 9]]
    assert data[1]["uneven"] == [[4, 5, 6, 7]]


def test_dispatch_batches_reads_on_the_main_process_only(data):
    assert data[0]["dispatched"] == [[0, 1, 2, 3], [8, 9, 10, 11]]
    assert data[1]["dispatched"] == [[4, 5, 6, 7], [12, 13, 14, 15]]
    assert data[0]["dispatched_reads"] == 16 and data[1]["dispatched_reads"] == 0


def test_an_iterable_dataset_is_dispatched_and_every_rank_takes_the_same_steps(data):
    # 5 batches of 2 on 2 processes: the last global batch (2 samples) is split one per process
    assert data[0]["stream"] == [[0, 1], [4, 5], [8]]
    assert data[1]["stream"] == [[2, 3], [6, 7], [9]]
    assert data[0]["stream_end"] == data[1]["stream_end"] == [False, False, True]
    assert data[0]["stream_reads"] == 10 and data[1]["stream_reads"] == 0


def test_gradient_state_remainder_and_end_of_dataloader(data):
    # Accelerate: remainder = len(dataset) % total batch size, known from the start of the pass
    for rank in (0, 1):
        assert data[rank]["remainder"] == [2, 2]
        assert data[rank]["end"] == [False, True]
        assert data[rank]["remainder_after"] == -1


def test_gather_for_metrics_with_gather_object_drops_the_repeated_samples(data):
    for rank in (0, 1):
        assert data[rank]["gathered_objects"] == [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9]]


def test_data_seed_sets_the_shuffle(data):
    order = torch.randperm(8, generator=torch.Generator().manual_seed(5)).tolist()
    batches = [order[i : i + 2] for i in range(0, 8, 2)]
    assert data[0]["data_seed_order"] == batches[0::2]
    assert data[1]["data_seed_order"] == batches[1::2]


def test_non_blocking_is_accepted(data):
    assert data[0]["non_blocking"] == [[0], [2]] and data[1]["non_blocking"] == [[1], [3]]


def test_skip_first_batches_starts_the_next_pass_later(data):
    assert data[0]["skipped"] == [[8, 9]] and data[1]["skipped"] == [[10, 11]]
    assert data[0]["after_skip"] == [[0, 1], [4, 5], [8, 9]]  # only the next pass skips


# ----------------------------------------------------------------------- gradient accumulation
@pytest.fixture(scope="module")
def accumulation():
    return run(accumulation_features)


def test_sync_each_batch_all_reduces_inside_the_accumulation_window(accumulation):
    assert accumulation[0]["sync_each_batch"]["sync"] is False
    assert accumulation[0]["sync_each_batch"]["grad"] == accumulation[1]["sync_each_batch"]["grad"]
    assert accumulation[0]["no_sync"]["grad"] != accumulation[1]["no_sync"]["grad"]


def test_sync_with_dataloader(accumulation):
    assert accumulation[0]["with_dataloader"] == [False, True, True]
    assert accumulation[0]["not_with_dataloader"] == [False, True, False]
    assert accumulation[0]["num_steps_seen_by_gradient_state"] == 2


# ------------------------------------------------------------------------------ process helpers
def test_trigger_set_on_one_process_is_seen_by_all(control):
    assert control[0]["trigger"] == control[1]["trigger"] == [True, False]


def test_on_process_on_last_process_on_local_process(control):
    assert control[0]["ran"] == ["process_0"]
    assert control[1]["ran"] == ["process_1", "last", "local_1"]


def test_state_is_the_shared_accelerator_state(control):
    for rank in (0, 1):
        state = control[rank]["state"]
        assert state["type"] == "AcceleratorState"
        assert state["distributed_type"] == state["shared_distributed_type"] == "MULTI_CPU"
        assert state["shared_processes"] == 2 and state["use_distributed"] is True
        assert state["partial_index"] == rank


def test_get_state_dict_unwrap_false_keeps_ddp_keys(control):
    assert control[0]["wrapped_keys"] == ["module.bias", "module.weight"]
    assert control[0]["unwrapped_keys"] == ["bias", "weight"]


def test_partial_state_works_without_an_accelerator():
    result = run(partial_state_alone)
    assert [r["processes"] for r in result] == [2, 2] and [r["index"] for r in result] == [0, 1]
    assert result[0]["distributed_type"] == "MULTI_CPU"
    assert (result[0]["plain"], result[1]["plain"]) == (["A", "B"], ["C"])
    assert (result[0]["padded"], result[1]["padded"]) == (["A", "B"], ["C", "C"])
    assert result[1]["dict"] == {"x": [3, 4], "y": ["c", "d"]}
    assert (result[0]["tensor"], result[1]["tensor"]) == ([0, 1], [2, 2])
    assert (result[0]["is_last"], result[1]["is_last"]) == (False, True)


# ------------------------------------------------------------------------------- compile, join
def test_dynamo_backend_compiles_in_prepare_and_trains_the_same():
    compiled = run(dynamo_losses, "eager")
    plain = run(dynamo_losses, None)
    assert compiled[0]["compiled"] and not plain[0]["compiled"]
    # torch.compile's eager backend replays the same aten ops: same numbers (tolerance: none needed,
    # but allow float32 rounding of a reordered graph, 4 ulp of each loss)
    for got, want in zip(compiled[0]["losses"], plain[0]["losses"], strict=True):
        assert abs(got - want) <= 4 * torch.finfo(torch.float32).eps * abs(want)


def test_join_uneven_inputs_lets_ranks_with_fewer_batches_finish():
    result = run(uneven_with_join, True)
    assert [r["steps"] for r in result] == [3, 2]
    assert result[0]["weight"] == result[1]["weight"]  # the shadowed all-reduce kept them equal


def test_profile_writes_one_chrome_trace_per_process_and_runs_the_schedule(tmp_path):
    result = run(profile_features, str(tmp_path / "traces"))
    assert result[0]["files"] == ["profile_0.json", "profile_1.json"]
    assert result[0]["trace_ready_calls"] == 1
    events = json.loads((tmp_path / "traces" / "profile_1.json").read_text())["traceEvents"]
    assert any("mm" in str(e.get("name", "")) for e in events)


@pytest.mark.slow
def test_fsdp_plugin_maps_onto_the_fsdp2_strategy():
    result = run(fsdp_plugin_step)
    for rank in (0, 1):
        assert result[rank]["distributed_type"] == "FSDP"
        assert result[rank]["reshard_after_forward"] is False
        assert result[rank]["sharded"]
    assert (result[0]["full_rows"], result[1]["full_rows"]) == (8, 0)  # gathered on rank 0, as Accelerate


# ------------------------------------------------------------------------------------ checkpoints
def test_automatic_checkpoint_naming_and_total_limit(checkpoints):
    result = checkpoints[0]
    assert result["after_four_saves"] == ["checkpoint_2", "checkpoint_3"]
    assert result["iteration"] == 4
    assert checkpoints[1]["after_four_saves"] == result["after_four_saves"]


def test_a_save_state_pre_hook_writes_into_the_checkpoint(checkpoints):
    assert "config.json" in checkpoints[0]["latest_files"]
    assert "model.safetensors" in checkpoints[0]["latest_files"]


def test_load_state_without_a_folder_loads_the_latest(checkpoints):
    result = checkpoints[0]
    assert result["loaded_latest"] == result["saved"]
    assert result["iteration_after_load"] == 4  # moved past checkpoint_3, so the next save is checkpoint_4


def test_load_state_pre_hook_can_take_over_loading(checkpoints):
    result = checkpoints[0]
    bumped = (torch.tensor(result["saved"]) + 1.0).tolist()  # the worker's float32 add, not Python's float64
    assert result["with_skipping_load_hook"] == bumped


def test_a_save_hook_that_removes_weights_skips_writing_them(checkpoints):
    assert checkpoints[0]["no_weights_folder"] == "checkpoint_4"
    assert "model.safetensors" not in checkpoints[0]["no_weights_files"]
    assert "random_states_1.pkl" in checkpoints[0]["no_weights_files"]


def test_rotation_never_deletes_the_last_complete_checkpoint_before_the_new_one_is_complete(checkpoints):
    result = checkpoints[0]
    assert result["crash_raised"]
    assert result["after_crash"] == ["checkpoint_0"]  # Accelerate would have deleted it already
    assert result["after_next_save"] == ["checkpoint_1"]


def test_project_configuration_iteration_names_the_first_checkpoint(checkpoints):
    assert checkpoints[0]["explicit_iteration"] == "checkpoint_10"


def test_save_model_writes_safetensors_shards_and_bin(tmp_path):
    from safetensors.torch import load_file

    result = run(save_model_features, str(tmp_path))[0]
    assert result["safe"] == ["model.safetensors"]
    assert result["pickle"] == ["pytorch_model.bin"]
    assert len(result["sharded_first"]) > len(result["sharded"]) > 2  # stale shards were removed
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert result["sharded"] == sorted([*shards, "model.safetensors.index.json"])
    assert all(name.startswith("model-0000") and "-of-0000" in name for name in shards)
    loaded = {}
    for shard in shards:
        loaded.update(load_file(tmp_path / "sharded" / shard))
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in loaded.values())
    for name, tensor in result["weights"].items():
        assert torch.equal(loaded[name], tensor)
        assert torch.equal(load_file(tmp_path / "safe" / "model.safetensors")[name], tensor)
    assert torch.equal(
        torch.load(tmp_path / "pickle" / "pytorch_model.bin")["0.weight"], result["weights"]["0.weight"]
    )


def test_skip_first_batches_on_a_plain_dataloader_gives_a_new_loader_over_the_rest():
    from notebook_launcher.utils import skip_first_batches

    loader = torch.utils.data.DataLoader(list(range(10)), batch_size=3)
    skipped = skip_first_batches(loader, 2)
    assert [b.tolist() for b in skipped] == [[6, 7, 8], [9]] and len(skipped) == 2
    assert [b.tolist() for b in loader][0] == [0, 1, 2]  # the original is left as it was
    with pytest.raises(TypeError, match="needs a DataLoader with a batch size"):
        skip_first_batches(range(10), 1)
