"""Pipeline parallelism (issue 35): real CPU processes (gloo) train an nn.Sequential cut into stages
and end with the weights of one-process training on the same global batches, within the noise
floor measured in the same test (tests/noise_floor.py); save_state/load_state resume bitwise;
save_model and merge-weights give the full model under its own names; every bad size is a
ConfigError naming it."""

from pathlib import Path

import pytest
import torch
from noise_floor import assert_losses_within_floor, assert_weights_within_floor
from pipeline_trainers import cases, cases_and_resume, make_model, reference, save_and_resume
from pipeline_transformer import transformer_cases

from notebook_launcher import ParallelismConfig, notebook_launch
from notebook_launcher.config.pipeline import check_batch, units
from notebook_launcher.errors import AcceleratorError, ConfigError
from notebook_launcher.runtime.parallel.pipeline.cut import stage_unit_names
from notebook_launcher.utils import TorchPipelineParallelConfig

TIMEOUT = 240


def _check(out: dict, batch: int, steps: int, what: str, **kwargs) -> None:
    want = reference(batch, steps, **kwargs)
    nudged = reference(batch, steps, nudge=True, **kwargs)
    assert_weights_within_floor(out["weights"], want["weights"], nudged["weights"], what)
    if batch == out.get("local_batch", batch):
        assert_losses_within_floor(out["losses"], want["losses"], nudged["losses"], what)
        # eval_step, forward only, after training: the trained model's loss on the first batch
        assert isinstance(out["eval_loss"], float), (what, out["eval_loss"])
        evals = [out["eval_loss"]], [want["eval_loss"]], [nudged["eval_loss"]]
        assert_losses_within_floor(*evals, what + " eval")


def _two(items, folder):
    return cases(items), save_and_resume({"pp_size": 2}, 8, folder)


def test_every_schedule_on_two_processes_equals_one_process(tmp_path):
    """GPipe with gradient accumulation, 1F1B with accumulation and clipping across stages, interleaved 1F1B (2 virtual
    stages per rank) cut at named split points, the zero-bubble V schedule with the loss given at
    the first step; then save_state / load_state / save_model / merge-weights on a pipeline."""
    items = [
        (({"pp_size": 2}, 8, 3), {"schedule": "gpipe", "n_microbatches": 4, "accumulate": 2}),
        (({"pp_size": 2}, 8, 3), {"schedule": "1f1b", "n_microbatches": 4, "accumulate": 2, "clip": 0.05}),
        (
            ({"pp_size": 2}, 8, 3),
            {"schedule": "interleaved_1f1b", "split_points": ["layers.0", "layers.2", "layers.3"]},
        ),
        (({"pp_size": 2}, 8, 3), {"schedule": "zbv_zero_bubble", "n_microbatches": 4, "loss_in_step": True}),
        (({"pp_size": 2}, 8, 3), {"schedule": "1f1b", "n_microbatches": 4, "mixed_precision": "bf16"}),
    ]
    folder = str(tmp_path)
    result = notebook_launch(_two, args=(items, folder), num_processes=2, timeout=TIMEOUT)
    (gpipe, one_f, interleaved, zbv, bf16), resume = result[0]
    _check(gpipe, 8, 3, "gpipe + accumulation", accumulate=2)  # (clipping would hide its scale)
    _check(one_f, 8, 3, "1f1b + accumulation + clipping", accumulate=2, clip=0.05)
    _check(interleaved, 8, 3, "interleaved_1f1b")
    _check(zbv, 8, 3, "zbv_zero_bubble")
    want = reference(8, 3)["weights"]  # bf16 autocast in every stage: close, not equal
    gap = max((bf16["weights"][k] - want[k]).abs().max().item() for k in want)
    assert 1e-6 < gap < 5e-2  # above: the stages did compute in bf16
    # the loss comes back on every rank, the same; clipping saw the norm over both stages
    assert [r[0][1]["losses"] for r in result] == [one_f["losses"]] * 2
    assert one_f["norms"] == result[1][0][1]["norms"] and len(one_f["norms"]) == 3
    # each rank holds only its stages' blocks, under the model's own names
    assert gpipe["local_keys"] == sorted(
        k for k in make_model().state_dict() if k.startswith(("embed.", "layers.0.", "layers.1."))
    )
    assert [r[0][2]["stages"] for r in result] == [[0, 2], [1, 3]]  # interleaved: looped placement
    assert [r[0][3]["stages"] for r in result] == [[0, 3], [1, 2]]  # zero-bubble V
    # interleaved: stages 0 and 2 of [embed] [layers.0-1] [layers.2] [layers.3, head]
    assert interleaved["local_keys"] == sorted(
        k for k in make_model().state_dict() if k.startswith(("embed.", "layers.2."))
    )
    for r in result:
        assert r[0][0]["local_params"] < r[0][0]["whole_params"] * 0.6
    # the first stage's rank let go of the blocks it does not hold (once prepare's result replaced them)
    assert result[0][0][0]["last_block_freed"] and not result[1][0][0]["last_block_freed"]
    # checkpoints: an exact resume; full weights that load into the plain model
    assert all(torch.equal(resume["resumed"][k], resume["straight"][k]) for k in resume["straight"])
    plain = make_model()
    from safetensors.torch import load_file

    plain.load_state_dict(load_file(f"{folder}/model/model.safetensors"))
    want, nudged = reference(8, 4), reference(8, 4, nudge=True)
    assert_weights_within_floor(plain.state_dict(), want["weights"], nudged["weights"], "save_model")
    from notebook_launcher.cli.merge_weights import merge_weights

    merged = load_file(str(merge_weights(Path(folder) / "ckpt", Path(folder) / "merged")))
    want, nudged = reference(8, 2), reference(8, 2, nudge=True)
    assert_weights_within_floor(merged, want["weights"], nudged["weights"], "merge-weights of save_state")
    _check_the_measured_schedule(result.performance)


def test_the_looped_and_zero_bubble_schedules_equal_one_process(tmp_path):
    """looped_bfs (with accumulation), interleaved_zero_bubble (with clipping across the stages),
    zbv_zero_bubble and DualPipeV (with accumulation) at PP=2 with 2 stages per rank: weights and losses of one process, and eval_step
    (forward only through the stages in order) the one-process loss, on every rank alike. Then
    save_state / load_state of interleaved_1f1b (2 stages per rank) resumes bitwise."""
    items = [
        (({"pp_size": 2}, 8, 3), {"schedule": "looped_bfs", "n_microbatches": 4, "accumulate": 2}),
        (({"pp_size": 2}, 8, 3), {"schedule": "interleaved_zero_bubble", "n_microbatches": 4, "clip": 0.05}),
        (({"pp_size": 2}, 8, 3), {"schedule": "zbv_zero_bubble", "n_microbatches": 2}),
        (({"pp_size": 2}, 8, 3), {"schedule": "dualpipev", "n_microbatches": 4, "accumulate": 2}),
        # streams: the whole stream under dispatch_batches (its default), and a stream read by shards
        (
            ({"pp_size": 2}, 16, 2),
            {"schedule": "zbv_zero_bubble", "n_microbatches": 4, "accumulate": 2, "stream": "dispatch"},
        ),
        (({"pp_size": 2}, 8, 3), {"schedule": "zbv_zero_bubble", "n_microbatches": 2, "stream": "shards"}),
    ]
    resume_at = ({"pp_size": 2}, str(tmp_path), "interleaved_1f1b")
    launched = notebook_launch(cases_and_resume, args=(items, *resume_at), num_processes=2, timeout=TIMEOUT)
    result, resume = [r[0] for r in launched], launched[0][1]
    looped, zero_bubble, zbv, dualpipev, dispatched, sharded = result[0]
    _check(looped, 8, 3, "looped_bfs + accumulation", accumulate=2)
    _check(zero_bubble, 8, 3, "interleaved_zero_bubble + clipping", clip=0.05)
    _check(zbv, 8, 3, "zbv_zero_bubble")
    _check(dualpipev, 8, 3, "dualpipev + accumulation", accumulate=2)
    assert [r[0]["stages"] for r in result] == [[0, 2], [1, 3]]  # looped placement
    assert [r[2]["stages"] for r in result] == [[0, 3], [1, 2]]  # V placement: rank 0 first and last
    assert zero_bubble["norms"] == result[1][1]["norms"] and len(zero_bubble["norms"]) == 3
    assert [r[3]["stages"] for r in result] == [[0, 3], [1, 2]]
    for case in range(4):  # the loss and the eval loss come back on every rank, the same
        assert result[0][case]["eval_loss"] == result[1][case]["eval_loss"]
        assert result[0][case]["losses"] == result[1][case]["losses"]
    # data: only the first and last stages read the batches. In the V, rank 0 holds both; rank 1
    # (stages 1 and 2) never indexes the dataset: its loader yields the batch's shape with no rows
    assert [r[2]["samples_read"] for r in result] == [8 * 3 + 8, 0]  # (+ the pass's prefetched batch)
    assert result[0][2]["batch_shapes"] == [((8, 8), torch.float32, (8, 1))]
    assert result[1][2]["batch_shapes"] == [((0, 8), torch.float32, (0, 1))]
    assert [r[0]["samples_read"] for r in result] == [8 * 6 + 8] * 2  # looped: rank 1 holds the last
    # streams too: the V's middle rank never iterates it, takes the same steps (the whole stream of 4
    # under dispatch, accumulation synced at its end) with placeholders, and training is one process's
    _check(dispatched, 16, 2, "zbv on a dispatched stream", accumulate=2)
    _check(sharded, 8, 3, "zbv on a stream read by shards")
    assert [r[4]["samples_read"] for r in result] == [64, 0]  # process 0 alone reads a dispatched stream
    assert [r[5]["samples_read"] for r in result] == [8 * 4 + 8, 0]  # 4 batches taken, 1 read ahead
    assert [len(r[4]["losses"]) for r in result] == [4, 4]
    # the saved position agrees on every stage: the whole pass (next epoch), or 4 batches into it
    assert [(r[4]["position"], r[5]["position"]) for r in result] == [((1, 0), (0, 4))] * 2
    assert result[1][4]["batch_shapes"] == [((0, 8), torch.float32, (0, 1))]
    assert result[1][5]["batch_shapes"] == [((0, 8), torch.float32, (0, 1))]
    assert result[0][5]["batch_shapes"] == [((8, 8), torch.float32, (8, 1))]
    assert all(torch.equal(resume["resumed"][k], resume["straight"][k]) for k in resume["straight"])
    # the ideal bubble: torch's own action lists on the unit clock: looped_bfs's is the formula
    # (p - 1)/(vm + p - 1), the zero-bubble schedules' (p - 1)/(6m + p - 1) (zbv at m = 2: torch pads
    # to 2p - 1 = 3 micro-batches, 2 of 14 units idle)
    assert [r[0]["ideal_bubble"] for r in result] == [pytest.approx(1 / 9)] * 2
    assert [r[1]["ideal_bubble"] for r in result] == [pytest.approx(1 / 25)] * 2
    assert [r[2]["ideal_bubble"] for r in result] == [pytest.approx(2 / 14)] * 2
    assert [r[3]["ideal_bubble"] for r in result] == [pytest.approx(1 / 25)] * 2


def test_a_stream_that_ends_oddly_ends_alike_on_the_middle_stage():
    """Empty, short and dropped last batches of a stream, dispatched and read by shards, two epochs:
    the middle rank of the V takes the same steps with the same end_of_dataloader flags (placeholders
    of 0 rows), reads nothing, and no rank waits on another."""
    from pipeline_trainers import stream_edges

    cases = [
        (0, 4, False, True),
        (0, 4, False, False),
        (10, 4, False, True),
        (10, 4, True, True),
        (10, 4, True, False),
    ]
    result = notebook_launch(stream_edges, args=(cases,), num_processes=2, timeout=TIMEOUT)
    first, middle = result[0], result[1]
    wanted = [[], [], [4, 4, 2], [4, 4], [4, 4]]
    for case, want, reader, follower in zip(cases, wanted, first, middle, strict=True):
        for epoch in range(2):
            assert [size for size, _ in reader["epochs"][epoch]] == want, case
            assert follower["epochs"][epoch] == [(0, last) for _, last in reader["epochs"][epoch]], case
            assert [last for _, last in reader["epochs"][epoch]] == [False] * (len(want) - 1) + [True] * bool(
                want
            ), case
        assert follower["read"] == 0 and reader["read"] == 2 * case[0], case
        assert reader["position"] == follower["position"] == 2, case


def _unit_blocks(kind_stage_micro):
    from types import SimpleNamespace

    return [
        SimpleNamespace(computation_type=k, stage_index=s, microbatch_index=m) for k, s, m in kind_stage_micro
    ]


def _gpipe(p, m):
    return {
        r: _unit_blocks([("F", r, i) for i in range(m)] + [("B", r, i) for i in range(m)]) for r in range(p)
    }


def _one_f_one_b(p, m):
    order = {}
    for r in range(p):
        warmup = min(p - 1 - r, m)
        steady = [block for i in range(warmup, m) for block in (("F", r, i), ("B", r, i - warmup))]
        tail = [("B", r, i) for i in range(m - warmup, m)]
        order[r] = _unit_blocks([("F", r, i) for i in range(warmup)] + steady + tail)
    return order


def _torch_order(schedule_class, p, m):
    """torch's own per-rank action lists of a schedule with 2 stages per rank (its list builder, on a
    stand-in object with the attributes it reads: building the schedule needs a process group)."""
    stand_in = schedule_class.__new__(schedule_class)
    stand_in.pp_group_size, stand_in.num_stages, stand_in._num_stages, stand_in._n_microbatches = (
        p,
        2 * p,
        2 * p,
        m,
    )
    stand_in.n_local_stages, stand_in._stages = 2, [None, None]
    stand_in.number_of_rounds = max(1, m // p)
    stand_in.microbatches_per_round = m // stand_in.number_of_rounds
    return {rank: stand_in._calculate_single_rank_operations(rank) for rank in range(p)}


def test_the_ideal_bubble_is_the_schedule_run_on_a_clock_of_unit_blocks():
    """The simulation gives GPipe's and 1F1B's (p - 1)/(m + p - 1), and for torch's own lists of
    looped BFS and interleaved 1F1B (2 stages per rank) (p - 1)/(2m + p - 1); for the zero-bubble
    ones (interleaved, ZBV, DualPipeV) (p - 1)/(6m + p - 1) (each rank busy 6m units: F, I, W of 2
    stages), far below the (p - 1)/(2m + p - 1) the timeline reported for them before."""
    from torch.distributed.pipelining import schedules

    from notebook_launcher.runtime.parallel.pipeline.ideal_bubble import simulated_bubble
    from notebook_launcher.runtime.parallel.pipeline.timeline import ideal_bubble

    for p, m in [(2, 2), (2, 4), (3, 6), (4, 4), (4, 8), (4, 16)]:
        formula = (p - 1) / (m + p - 1)
        assert simulated_bubble(_gpipe(p, m)) == pytest.approx(formula), (p, m)
        assert simulated_bubble(_one_f_one_b(p, m)) == pytest.approx(formula), (p, m)
        assert ideal_bubble("1f1b", p, m, 1) == pytest.approx(formula)
        if m % p == 0:
            for schedule in (schedules.ScheduleLoopedBFS, schedules.ScheduleInterleaved1F1B):
                got = simulated_bubble(_torch_order(schedule, p, m))
                assert got == pytest.approx(ideal_bubble("interleaved_1f1b", p, m, 2)), (schedule, p, m)
        if m >= 2 * p:
            zero_bubble = (schedules.ScheduleInterleavedZeroBubble, schedules.ScheduleZBVZeroBubble)
            for schedule in (*zero_bubble, schedules.ScheduleDualPipeV):
                got = simulated_bubble(_torch_order(schedule, p, m))
                assert got == pytest.approx((p - 1) / (6 * m + p - 1)), (schedule.__name__, p, m)
                assert got < ideal_bubble("zbv_zero_bubble", p, m, 2) / 2
    # fewer micro-batches than ZBV's 2p - 1: torch pads the lists and leaves the extra ones out
    assert simulated_bubble(_torch_order(schedules.ScheduleZBVZeroBubble, 4, 4)) == pytest.approx(0.2)
    waiting = {0: _unit_blocks([("B", 0, 0)]), 1: _unit_blocks([("F", 1, 0)])}  # B before its F arrives
    with pytest.raises(ValueError, match="wait on each other"):
        simulated_bubble(waiting)


def _check_the_measured_schedule(performance) -> None:
    """result.performance carries each stage's last step (the last launch's pipeline: 1f1b, m = 2)
    and the RunView draws it as the pipeline tab: one lane per stage, a block per micro-batch."""
    from notebook_launcher import RunView
    from notebook_launcher.launch.events import StepsMeasured

    pipes = {r.rank: r.pipeline for r in performance.ranks}
    assert [pipes[rank]["stages"] for rank in (0, 1)] == [[0], [1]]
    for pipe in pipes.values():
        assert pipe["schedule"] == "1f1b" and pipe["ideal_bubble"] == pytest.approx(1 / 3)
        assert 0.0 <= pipe["mean_bubble"] < 1.0
        assert sorted((kind, chunk) for _, kind, chunk, _, _ in pipe["blocks"]) == [
            ("B", 0), ("B", 1), ("F", 0), ("F", 1)
        ]  # fmt: skip
        starts = {(kind, chunk): t0 for _, kind, chunk, t0, _ in pipe["blocks"]}
        assert starts["F", 0] < starts["F", 1] and starts["B", 0] < starts["B", 1]  # measured order
    assert "stage(s) [0]" in str(performance) and "ideal 0.333" in str(performance)
    view = RunView()
    for rank, pipe in pipes.items():
        view(StepsMeasured(rank, {"steps": 2, "step_s": 0.01, "pipeline": pipe}))
    view.refresh()
    assert view.tabs.titles[-1] == "pipeline"
    drawn = view.pipeline_pane.value
    assert drawn.count("nl-pipeline-lane") == 2 and drawn.count("nl-pipeline-block") == 8
    assert "rank 1 · stage(s) [1]" in drawn and "(ideal 0.333)" in drawn


@pytest.mark.slow
def test_four_stages_and_pipeline_by_fsdp2_and_by_tp_on_four_processes(tmp_path):
    """PP=4 (1F1B), PP=2 x FSDP2=2 with accumulation and clipping, PP=2 x TP=2 interleaved; then
    save_state / load_state at PP=4 (two middle stages) resumes bitwise."""
    items = [
        (({"pp_size": 4}, 8, 3), {"schedule": "1f1b"}),
        (
            ({"pp_size": 2, "dp_shard_size": 2}, 8, 2),
            {"schedule": "1f1b", "n_microbatches": 2, "accumulate": 2, "clip": 0.05},
        ),
        (({"pp_size": 2, "tp_size": 2}, 8, 3), {"schedule": "interleaved_1f1b", "n_microbatches": 4}),
        # streams: dispatched over PP=4 (two middle stages), read by shards on the V x tp=2
        (({"pp_size": 4}, 16, 4), {"schedule": "1f1b", "stream": "dispatch"}),
        (({"pp_size": 2, "tp_size": 2}, 8, 3), {"schedule": "zbv_zero_bubble", "stream": "shards"}),
    ]
    resume_at = ({"pp_size": 4}, str(tmp_path), "1f1b")
    launched = notebook_launch(cases_and_resume, args=(items, *resume_at), num_processes=4, timeout=TIMEOUT)
    result, resume = [r[0] for r in launched], launched[0][1]
    assert all(torch.equal(resume["resumed"][k], resume["straight"][k]) for k in resume["straight"])
    pp4, fsdp, tp, pp4_stream, v_tp_stream = result[0]
    _check(pp4, 8, 3, "pp=4")
    assert [r[0]["stages"] for r in result] == [[0], [1], [2], [3]] and pp4["mesh_dims"] == ("pp",)
    assert [r[0]["samples_read"] for r in result] == [32, 0, 0, 32]  # the middle stages read nothing
    assert fsdp["mesh_dims"] == ("pp", "dp_shard")
    fsdp["local_batch"] = 8  # two data shards of 8: a global batch of 16, losses are per shard
    _check(fsdp, 16, 2, "pp x fsdp2", accumulate=2, clip=0.05)
    assert tp["mesh_dims"] == ("pp", "tp")
    _check(tp, 8, 3, "pp x tp")
    assert [r[2]["stages"] for r in result] == [[0, 2], [0, 2], [1, 3], [1, 3]]
    # streams: process 0 alone reads a dispatched one (the last stage receives, the middle stages
    # are told); by shards the V's first-and-last ranks (tp peers) read it, the middle ones do not
    _check(pp4_stream, 16, 4, "pp=4 on a dispatched stream")
    _check(v_tp_stream, 8, 3, "zbv x tp on a stream read by shards")
    assert [r[3]["samples_read"] for r in result] == [64, 0, 0, 0]
    assert [r[4]["samples_read"] for r in result] == [8 * 4 + 8] * 2 + [0, 0]
    assert [r[3]["batch_shapes"][0][0] for r in result] == [(16, 8), (0, 8), (0, 8), (16, 8)]


@pytest.mark.slow
def _mlp_and_transformer(items, transformer_items):
    return cases(items), transformer_cases(transformer_items)


def test_three_dimensions_pipeline_by_fsdp2_by_tp_on_eight_processes():
    """PP=2 (interleaved, 2 stages per rank) x FSDP2=2 x TP=2, with accumulation and clipping; then
    the attention transformer (not an nn.Sequential; q/k/v and the MLP split over "tp", each rank
    running its share of the heads) on the same mesh, to one process's weights."""
    from pipeline_transformer import transformer_reference

    mesh = {"pp_size": 2, "dp_shard_size": 2, "tp_size": 2}
    items = [
        (
            (mesh, 8, 2),
            {"schedule": "interleaved_1f1b", "n_microbatches": 2, "accumulate": 2, "clip": 0.05},
        )
    ]
    launched = notebook_launch(
        _mlp_and_transformer,
        args=(items, [("interleaved_1f1b", 8, 2, 2, mesh)]),
        num_processes=8,
        timeout=TIMEOUT,
    )
    result = [r[0] for r in launched]
    transformer = launched[0][1][0]
    assert transformer["mesh_dims"] == ("pp", "dp_shard", "tp")
    # each rank holds a quarter of a q projection's 16 rows: its tp half of the heads, FSDP2-halved
    assert set(transformer["q_proj_rows"]) == {"layers.0.attn.q_proj.weight", "layers.2.attn.q_proj.weight"}
    assert set(transformer["q_proj_rows"].values()) == {4}
    want, nudged = transformer_reference(16, 2), transformer_reference(16, 2, nudge=True)  # 2 shards of 8
    assert_weights_within_floor(transformer["weights"], want["weights"], nudged["weights"], "transformer 3-D")
    out = result[0][0]
    assert out["mesh_dims"] == ("pp", "dp_shard", "tp")
    assert [r[0]["stages"] for r in result] == [[0, 2]] * 4 + [[1, 3]] * 4
    out["local_batch"] = 8  # two data shards of 8: a global batch of 16
    _check(out, 16, 2, "pp x fsdp2 x tp", accumulate=2, clip=0.05)
    assert len({tuple(r[0]["norms"]) for r in result}) == 1  # one norm over every stage and piece


# ------------------------------------------------------------------ sizes that do not fit
def test_bad_pipeline_sizes_are_config_errors_naming_the_value():
    with pytest.raises(ConfigError, match="n_microbatches=2 is fewer than the pp_size=4"):
        ParallelismConfig(pp_size=4, pp_handler=TorchPipelineParallelConfig(n_microbatches=2))
    with pytest.raises(
        ConfigError, match="'dualpipev' needs at least one micro-batch per stage: n_microbatches=2"
    ):
        ParallelismConfig(pp_size=2, pp_handler=TorchPipelineParallelConfig("dualpipev", 2))
    with pytest.raises(ConfigError, match="n_microbatches=3 must be a multiple of pp_size=2"):
        ParallelismConfig(pp_size=2, pp_handler=TorchPipelineParallelConfig("interleaved_1f1b", 3))
    with pytest.raises(ConfigError, match="split_points=\\['layers.1', 'layers.2'\\] names 2 cut"):
        ParallelismConfig(
            pp_size=2, pp_handler=TorchPipelineParallelConfig(split_points=["layers.1", "layers.2"])
        )
    with pytest.raises(ConfigError, match="schedule='gpipe' runs one stage per rank, but virtual_stages=2"):
        TorchPipelineParallelConfig("gpipe", virtual_stages=2)
    with pytest.raises(ConfigError, match="'zero_bubble'.*allowed values"):
        TorchPipelineParallelConfig("zero_bubble")
    with pytest.raises(ConfigError, match="pp_size=2 with dp_replicate_size=2 and dp_shard_size=1"):
        ParallelismConfig(pp_size=2, dp_replicate_size=2)
    with pytest.raises(ConfigError, match="multiplies to 4, but the run has world size 3"):
        ParallelismConfig(pp_size=2, dp_shard_size=2).check_world_size(3)
    with pytest.raises(ConfigError, match="batch of 6 samples does not divide into n_microbatches=4"):
        check_batch(6, 4)


def test_what_a_pipeline_refuses_inside_the_ranks():
    from pipeline_trainers import misuses

    result = notebook_launch(misuses, num_processes=2, timeout=TIMEOUT)
    assert result[0] == result[1] and len(result[0]) == 4
    split, batch, call, backward = result[0]
    assert split.startswith(
        "ConfigError: TorchPipelineParallelConfig split_points names 'layer.2', which is no"
    )
    assert "Did you mean 'layers.2'?" in split
    assert batch.startswith("ConfigError: The batch of 6 samples does not divide into n_microbatches=4")
    assert call.startswith("AcceleratorError: A pipeline-parallel model holds only its stage(s)")
    assert backward.startswith("AcceleratorError: In a pipeline, `loss = model.step(inputs, target)`")


def test_a_launch_whose_pipeline_does_not_fit_its_processes_starts_nothing():
    with pytest.raises(ConfigError, match="world size 2"):
        notebook_launch(torch.zeros, num_processes=2, parallelism_config=ParallelismConfig(pp_size=4))


def test_where_the_model_is_cut():
    blocks = units(make_model(6))
    assert [n for n, _ in blocks] == ["embed", *(f"layers.{i}" for i in range(6)), "head"]
    # even by parameter count: the small embed and head ride with the blocks beside them
    assert stage_unit_names(blocks, 2, None) == [
        ["embed", "layers.0", "layers.1", "layers.2"],
        ["layers.3", "layers.4", "layers.5", "head"],
    ]
    assert stage_unit_names(blocks, 3, ["layers.1", "layers.5"])[1] == [
        "layers.1",
        "layers.2",
        "layers.3",
        "layers.4",
    ]
    with pytest.raises(
        ConfigError, match="split_points names 'layer.3', which is no block.*Did you mean 'layers.3'"
    ):
        stage_unit_names(blocks, 2, ["layer.3"])
    with pytest.raises(ConfigError, match="8 blocks .* for 9 pipeline stages"):
        stage_unit_names(blocks, 9, None)
    with pytest.raises(
        AcceleratorError,
        match="cannot cut Linear: its forward reads self.weight after taking its input.*plain chain",
    ):
        units(torch.nn.Linear(2, 2))


class _Residual(torch.nn.Module):  # a step between the blocks: not a chain
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

    def forward(self, x):
        h = self.a(x)
        return self.b(h) + h


class _Twice(_Residual):
    def forward(self, x):
        return self.a(self.b(self.a(x)))


class _Branchy(_Residual):
    def forward(self, x):
        return self.b(x) if x.sum() > 0 else self.a(x)


def test_a_model_that_is_not_sequential_is_cut_where_its_forward_calls_its_blocks():
    """The blocks of a torchtitan-shaped model come from its forward (torch.fx, children opaque):
    embed, each ModuleList entry, norm, head, in running order (head is declared first); the stage
    modules run them in that order and give the model's output. A forward that is no plain chain is
    an AcceleratorError naming the step and saying what to do."""
    from pipeline_transformer import make_tokens, make_transformer

    from notebook_launcher.runtime.parallel.pipeline.cut import skeleton

    model = make_transformer()
    blocks = units(model)
    assert [n for n, _ in blocks] == ["embed", *(f"layers.{i}" for i in range(4)), "norm", "head"]
    first, second = stage_unit_names(blocks, 2, ["layers.2"])
    x = make_tokens()[:4][0]
    with torch.no_grad():
        assert torch.equal(skeleton(model, second)(skeleton(model, first)(x)), model(x))
    assert list(skeleton(model, second).state_dict())[0] == "layers.2.attn_norm.weight"
    with pytest.raises(
        AcceleratorError, match=r"cannot cut _Residual: its forward computes `add` after \[.a., .b.\]"
    ):
        units(_Residual())
    with pytest.raises(AcceleratorError, match="cannot cut _Twice: its forward calls 'a' twice"):
        units(_Twice())
    with pytest.raises(AcceleratorError, match="cannot cut _Branchy: torch.fx cannot trace its forward"):
        units(_Branchy())


def test_an_attention_transformer_that_is_not_sequential_trains_as_one_process():
    """The tiny transformer (MultiheadAttention, a ModuleList, AdamW, cross-entropy) at PP=2 with
    1F1B and interleaved 1F1B: each step's loss and the weights after 3 steps are one process's."""
    from pipeline_transformer import transformer_cases, transformer_reference

    items = [("1f1b", 8, 3, 4), ("interleaved_1f1b", 8, 3, 4)]
    result = notebook_launch(transformer_cases, args=(items,), num_processes=2, timeout=TIMEOUT)
    want, nudged = transformer_reference(8, 3), transformer_reference(8, 3, nudge=True)
    for case, out in zip(items, result[0], strict=True):
        assert_weights_within_floor(out["weights"], want["weights"], nudged["weights"], case[0])
        assert_losses_within_floor(out["losses"], want["losses"], nudged["losses"], case[0])
    assert result[0][0]["losses"] == result[1][0]["losses"]
    assert [r[0]["stages"] for r in result] == [[0], [1]]
    assert {k.split(".")[0] for k in result[1][0]["local_keys"]} == {"layers", "norm", "head"}
    assert not any(k.startswith("embed.") for k in result[1][1]["local_keys"])  # stages 1 and 3


def test_the_pipeline_axis_in_the_mesh_the_data_ranks_and_the_yaml_section():
    from notebook_launcher.config.parallelism import check_section, from_section, mesh_coordinates, to_section
    from notebook_launcher.runtime.parallel.mesh import data_leaders, data_rank_and_size

    pc = ParallelismConfig(
        pp_size=2,
        dp_shard_size=2,
        pp_handler=TorchPipelineParallelConfig("interleaved_1f1b", 4, 2, ["layers.2"] * 3),
    )
    assert pc.mesh_layout() == (("pp", "dp_shard"), (2, 2)) and pc.total_size == 4
    # pipeline stages are the outermost dim; ranks of different stages read the same batches
    assert [c["pp"] for c in mesh_coordinates(pc, 4)] == [0, 0, 1, 1]
    assert [data_rank_and_size(pc, r, 4) for r in range(4)] == [(0, 2), (1, 2), (0, 2), (1, 2)]
    assert data_leaders(pc, 4) == [2, 3]  # the last stage holds the outputs
    section = to_section(pc)
    assert section["parallelism_config_pp_schedule"] == "interleaved_1f1b"
    back = from_section(check_section(section))
    assert back.pp_size == 2 and back.pp_handler == TorchPipelineParallelConfig(
        "interleaved_1f1b", 4, 2, ["layers.2"] * 3
    )
    with pytest.raises(ConfigError, match="loss_fn does not travel"):
        check_section(
            ParallelismConfig(
                pp_size=2, pp_handler=TorchPipelineParallelConfig(loss_fn=torch.nn.functional.mse_loss)
            )
        )


CLI_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import torch
from torch import nn
from torch.utils.data import DataLoader
from pipeline_trainers import make_data, make_model
from notebook_launcher import Accelerator

accelerator = Accelerator()
pc = accelerator.parallelism_config
model = make_model()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model, opt, loader = accelerator.prepare(model, opt, DataLoader(make_data(), batch_size=8))
for i, (x, y) in enumerate(loader):
    if i == 3:
        break
    loss = model.step(x, target=y, loss_fn=nn.functional.mse_loss)
    opt.step()
    opt.zero_grad()
    accelerator.print("loss", loss.item())
state = accelerator.get_state_dict(model)
if accelerator.is_main_process:
    torch.save(state, {out!r})
print("rank", accelerator.process_index, pc.pp_handler.schedule, pc.pp_handler.n_microbatches, model.stage_ids)
"""


@pytest.mark.slow
def test_the_cli_flags_carry_the_pipeline_to_the_workers(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "train.py"
    out = tmp_path / "weights.pt"
    script.write_text(CLI_SCRIPT.format(tests=str(Path(__file__).parent), out=str(out)))
    flags = ["--cpu", "--num_processes", "2", "--parallelism_config_pp_size", "2"]
    flags += ["--parallelism_config_pp_schedule", "gpipe", "--parallelism_config_pp_n_microbatches", "4"]
    flags += ["--parallelism_config_pp_split_points", "layers.3"]
    done = subprocess.run(
        [sys.executable, "-m", "notebook_launcher", "launch", *flags, str(script)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 gpipe 4 [0]" in done.stdout and "rank 1 gpipe 4 [1]" in done.stdout, done.stdout
    want, nudged = reference(8, 3), reference(8, 3, nudge=True)
    assert_weights_within_floor(torch.load(out), want["weights"], nudged["weights"], "CLI gpipe")


def test_the_straggler_verdict_names_the_slow_stage():
    from notebook_launcher.estimate.performance import PerformanceReport

    def payload(rank, compute_s, wait_s):
        pipe = {
            "stages": [rank],
            "schedule": "1f1b",
            "microbatches": 4,
            "mean_bubble": wait_s,
            "ideal_bubble": 0.2,
        }
        return {"steps": 10, "step_s": 10.0, "forward_s": compute_s, "wait_s": wait_s * 10, "pipeline": pipe}

    report = PerformanceReport.from_payloads({0: payload(0, 4.0, 0.5), 1: payload(1, 9.0, 0.02)})
    assert report.kind == "compute straggler" and report.straggler == 1
    assert report.verdict.startswith("rank 1 (pipeline stage(s) [1]) is the straggler: its compute takes")
    assert "rank 0 stage(s) [0]: bubble 0.500 (ideal 0.200, 1f1b, 4 micro-batches)" in str(report)


def test_estimate_memory_keeps_the_largest_stage():
    from notebook_launcher import estimate_memory

    model = make_model(6)
    stages = stage_unit_names(units(model), 2, None)
    modules = dict(model.named_modules())
    largest = max(sum(p.numel() for name in stage for p in modules[name].parameters()) for stage in stages)
    row = estimate_memory(lambda: make_model(6), 2, strategies=["DDP"], pp_size=2).rows[-1]
    assert (row.strategy, row.processes, row.parameters) == ("PP=2", 2, 4 * largest)
    ddp = estimate_memory(lambda: make_model(6), 2, strategies=["DDP"]).rows[0]
    assert row.parameters < 0.6 * ddp.parameters
    both = estimate_memory(lambda: make_model(6), 4, strategies=["DDP"], pp_size=2, dp_shard_size=2).rows[-1]
    assert both.strategy == "PP=2 x FSDP=2" and both.processes == 4 and both.parameters < row.parameters
