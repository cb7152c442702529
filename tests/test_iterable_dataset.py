"""A prepared DataLoader over a stream (IterableDataset): every rank takes the same number of steps,
even_batches wraps around to the start of the stream, drop_last drops an incomplete last round,
split_batches splits one batch, gather_for_metrics returns exactly the stream (issue 11, section 2).

As in Accelerate, a stream is dispatched by default (rank 0 reads it and sends each rank its slice:
dispatch.py); with DataLoaderConfiguration(dispatch_batches=False) every rank reads it and keeps its
share of each round (IterableDatasetShard: stream_plan.py). Three levels: the pure round logic for
every stream length 1-40 on 2 and 3 ranks; the per-rank loader in this process (collation, len(),
resume, DataLoader workers); real launches of both modes that train with a collective every step
and gather the sample ids."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from notebook_launcher import Accelerator, DataLoaderConfiguration, notebook_launch
from notebook_launcher.errors import ConfigError
from notebook_launcher.runtime.data import (
    DataLoaderShard,
    GradientState,
    plan_epoch,
    shard_stream,
    steps_in_stream,
)

LENGTHS = range(1, 41)


# ------------------------------------------------------------------------------------ streams
class Stream(IterableDataset):
    """Sample i is the tensor [i]; `sized` adds __len__; `split_by_worker` splits itself over
    DataLoader workers the way torch's documentation shows (worker k takes samples k, k+W, ...)."""

    def __init__(self, n: int, split_by_worker: bool = False) -> None:
        self.n, self.split_by_worker = n, split_by_worker
        self.epochs_set: list[int] = []

    def __iter__(self):
        start, step = 0, 1
        info = get_worker_info()
        if self.split_by_worker and info is not None:
            start, step = info.id, info.num_workers
        return (torch.tensor([float(i)]) for i in range(start, self.n, step))

    def set_epoch(self, epoch: int) -> None:
        self.epochs_set.append(epoch)


class SizedStream(Stream):
    def __len__(self) -> int:
        return self.n


def _options(world: int):
    """(batch_size, split_batches, even_batches, drop_last) worth checking on `world` ranks."""
    sizes = [(1, False), (3, False), (4, False), (world, True), (2 * world, True)]
    sizes = sizes if world > 1 else sizes[:3]
    for (batch_size, split), even, drop_last in itertools.product(sizes, (True, False), (True, False)):
        yield batch_size, split, even, drop_last


def _shape(rank, world, batch_size, split, even, drop_last) -> dict:
    """The keyword arguments shard_stream, steps_in_stream and plan_epoch share."""
    names = ("rank", "world_size", "batch_size", "split_batches", "even_batches", "drop_last")
    return dict(zip(names, (rank, world, batch_size, split, even, drop_last), strict=True))


def _steps(n, world, batch_size, split, even, drop_last, size_of=None, items=None):
    return [
        list(
            shard_stream(
                range(n) if items is None else items,
                size_of=size_of,
                **_shape(rank, world, batch_size, split, even, drop_last),
            )
        )
        for rank in range(world)
    ]


def _gathered(per_rank_steps) -> list:
    """What gather_for_metrics returns over an epoch: each step's items of all ranks in rank order,
    the last step's cut to the genuine count the round carries."""
    out = []
    for steps in itertools.zip_longest(*per_rank_steps):
        round_items = [i for step in steps if step is not None for i in step.items]
        last = next(step for step in steps if step is not None)
        out += round_items[: last.real] if last.last and last.real is not None else round_items
    return out


# -------------------------------------------------------------------- the round logic, pure
@pytest.mark.parametrize("world", [2, 3])
def test_every_length_gives_even_steps_and_gathers_exactly_the_stream(world):
    for n, (batch_size, split, even, drop_last) in itertools.product(LENGTHS, _options(world)):
        case = f"n={n} batch_size={batch_size} split={split} even={even} drop_last={drop_last}"
        steps = _steps(n, world, batch_size, split, even, drop_last)
        counts = [len(s) for s in steps]
        per_round = batch_size if split else batch_size * world
        for rank, rank_steps in enumerate(steps):
            assert counts[rank] == steps_in_stream(
                n, **_shape(rank, world, batch_size, split, even, drop_last)
            ), case
            assert [s.last for s in rank_steps] == [False] * (len(rank_steps) - 1) + [True] * bool(
                rank_steps
            ), case
        if drop_last:
            assert counts == [n // per_round] * world, case
            assert _gathered(steps) == list(range(n // per_round * per_round)), case
        elif even:
            assert counts == [-(-n // per_round)] * world, case  # the same number of steps on every rank
            assert all(len(s.items) == per_round // world for r in steps for s in r), case  # full batches
            assert _gathered(steps) == list(range(n)), case  # the repeated samples are dropped, no more
        else:
            assert _gathered(steps) == list(range(n)), case


@pytest.mark.parametrize("world", [1, 2, 3])
def test_a_stream_is_dealt_as_the_same_samples_in_a_map_style_dataset(world):
    """Accelerate deals a stream (IterableDatasetShard) as it deals indices (BatchSamplerShard):
    the stream's plan must equal index_plan's, already checked by table in test_sharding.py.
    A world of one is not sharded: its short last batch stays short."""
    for n, (batch_size, split, even, drop_last) in itertools.product(LENGTHS, _options(world)):
        indices = list(range(n))
        batches = [indices[i : i + batch_size] for i in range(0, n, batch_size)]
        if drop_last and len(batches[-1]) < batch_size:
            batches.pop()
        for rank, rank_steps in enumerate(_steps(n, world, batch_size, split, even, drop_last)):
            plan = plan_epoch(batches, **_shape(rank, world, batch_size, split, even, drop_last))
            case = f"n={n} rank={rank} batch_size={batch_size} split={split} even={even} drop={drop_last}"
            assert [s.items for s in rank_steps] == plan.batches, case
            padded = rank_steps[-1].real if rank_steps else None
            if padded is not None:
                assert padded == plan.last_round_real == n % (batch_size if split else batch_size * world), (
                    case
                )


def test_the_reported_case_twelve_samples_batch_four_two_ranks():
    """The issue's case: rank 0 took two batches, rank 1 one, and rank 0 hung in its all-reduce."""
    steps = _steps(12, 2, 4, False, True, False)
    assert [[s.items for s in r] for r in steps] == [
        [[0, 1, 2, 3], [8, 9, 10, 11]],
        [[4, 5, 6, 7], [0, 1, 2, 3]],  # the last round wraps around to the start of the stream
    ]
    assert steps[1][-1].real == 4 and steps[1][-1].size == 8


def test_a_stream_shorter_than_one_round_is_cycled():
    assert [[s.items for s in r] for r in _steps(3, 2, 4, False, True, False)] == [
        [[0, 1, 2, 0]],
        [[1, 2, 0, 1]],
    ]


def test_a_stream_of_whole_batches_counts_samples_for_gather_for_metrics():
    """batch_size=None: the dataset yields its own batches; a round is one batch per rank, and the
    genuine count is in samples (the leading dimension), as gather_for_metrics cuts samples."""
    sizes = [3, 3, 3, 1]
    steps = _steps(4, 3, None, False, True, False, size_of=lambda b: sizes[b], items=range(4))
    assert [[s.items for s in r] for r in steps] == [[[0], [3]], [[1], [0]], [[2], [1]]]
    assert steps[0][-1].real == 1 and steps[0][-1].size == 1 + 3 + 3
    with pytest.raises(ConfigError, match="batch_size=None"):
        _steps(4, 2, None, True, True, False)


def test_split_batches_needs_a_batch_size_the_ranks_divide():
    with pytest.raises(ConfigError, match=r"batch_size \(4\).*number of processes \(3\)"):
        _loader(Stream(10), rank=0, world=3, batch_size=4, split_batches=True)


# ------------------------------------------------------------- the prepared loader, one process
def _loader(dataset, rank, world, batch_size=4, state=None, **options) -> DataLoaderShard:
    loader_options = {k: options.pop(k) for k in ("num_workers", "drop_last") if k in options}
    return DataLoaderShard(
        DataLoader(dataset, batch_size=batch_size, **loader_options),
        rank=rank,
        world_size=world,
        device=None,
        gradient_state=state or GradientState(),
        dispatch_batches=False,  # every rank reads the stream (a dispatched one needs a real world)
        **options,
    )


def _epoch(loader: DataLoaderShard) -> list[tuple[list[int], bool, int]]:
    """(sample ids, end_of_dataloader, remainder) for each batch of one epoch."""
    state = loader.gradient_state
    return [(b.flatten().long().tolist(), state.end_of_dataloader, state.remainder) for b in loader]


@pytest.mark.parametrize("world", [2, 3])
def test_the_prepared_loader_yields_collated_shares_and_marks_the_padded_last_round(world):
    for n in (1, 4, 11, 12, 13, 25):
        want = _steps(n, world, 4, False, True, False)
        for rank in range(world):
            loader = _loader(SizedStream(n), rank, world)
            got = _epoch(loader)
            assert [ids for ids, _, _ in got] == [s.items for s in want[rank]], (n, rank)
            assert [end for _, end, _ in got] == [s.last for s in want[rank]]
            padded = n % (4 * world)
            assert got[-1][2] == padded  # gather_for_metrics keeps this many (0: nothing repeated)
            assert all(remainder == -1 for _, _, remainder in got[:-1])
            assert len(loader) == len(got)


def test_len_raises_the_usual_type_error_for_a_stream_without_length():
    loader = _loader(Stream(10), rank=0, world=2)
    with pytest.raises(TypeError, match="object of type 'Stream' has no len()"):
        len(loader)
    assert len(_epoch(loader)) == 2  # iterating it works all the same


def test_drop_last_and_uneven_batches_in_the_prepared_loader():
    dropped = [_epoch(_loader(SizedStream(13), r, 2, drop_last=True)) for r in (0, 1)]
    assert [[ids for ids, _, _ in e] for e in dropped] == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]
    assert len(_loader(SizedStream(13), 1, 2, drop_last=True)) == 1
    uneven = [_epoch(_loader(SizedStream(13), r, 2, even_batches=False)) for r in (0, 1)]
    assert [[ids for ids, _, _ in e] for e in uneven] == [
        [[0, 1, 2, 3], [8, 9, 10, 11]],
        [[4, 5, 6, 7], [12]],
    ]
    assert [len(_loader(SizedStream(13), r, 2, even_batches=False)) for r in (0, 1)] == [2, 2]
    assert [len(_loader(SizedStream(9), r, 2, even_batches=False)) for r in (0, 1)] == [2, 1]


def test_split_batches_cuts_one_batch_of_the_users_size():
    epochs = [_epoch(_loader(SizedStream(10), r, 2, split_batches=True)) for r in (0, 1)]
    assert [[ids for ids, _, _ in e] for e in epochs] == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]]
    assert epochs[0][-1][1:] == (True, 2)  # the last batch: 2 genuine samples of 4


@pytest.mark.parametrize("split_by_worker", [True, False], ids=["worker-split-stream", "replicated-stream"])
def test_dataloader_workers_still_work(split_by_worker):
    """With num_workers=2 the rounds are cut after the workers: a stream that splits itself over the
    workers is read once, one that does not is read twice (as plain torch would), and either way
    every rank takes the same number of full steps."""
    n, world = 13, 2
    epochs = [
        _epoch(_loader(SizedStream(n, split_by_worker=split_by_worker), r, world, num_workers=2))
        for r in range(world)
    ]
    assert len({len(e) for e in epochs}) == 1
    assert all(len(ids) == 4 for e in epochs for ids, _, _ in e)
    plain = torch.cat(list(DataLoader(Stream(n, split_by_worker), batch_size=4, num_workers=2))).long()
    per_rank = [[ids for ids, _, _ in e] for e in epochs]
    gathered = _gathered([[_Step(ids, end, rem) for ids, end, rem in e] for e in epochs])
    assert gathered == plain.flatten().tolist()  # the stream as the user's own loader delivers it
    assert per_rank[0][0] == plain.flatten().tolist()[:4]


class _Step:
    def __init__(self, items, last, remainder):
        self.items, self.last, self.real = items, last, (remainder if remainder > 0 else None)


def test_a_saved_position_resumes_the_stream_where_it_stopped():
    loader = _loader(SizedStream(21), rank=1, world=2)
    whole = [ids for ids, _, _ in _epoch(loader)]
    stopped = _loader(SizedStream(21), rank=1, world=2)
    iterator = iter(stopped)
    next(iterator)
    saved = stopped.state_dict()
    iterator.close()
    assert saved["batches_yielded"] == 1
    resumed = _loader(SizedStream(21), rank=1, world=2)
    resumed.load_state_dict(saved)
    assert [ids for ids, _, _ in _epoch(resumed)] == whole[1:]
    assert [ids for ids, _, _ in _epoch(resumed)] == whole  # the next epoch starts from the beginning


def test_the_epoch_reaches_a_stream_with_set_epoch():
    stream = SizedStream(8)
    loader = _loader(stream, rank=0, world=2)
    _epoch(loader)
    _epoch(loader)
    loader.set_epoch(7)
    _epoch(loader)
    assert stream.epochs_set == [0, 1, 7]


# --------------------------------------------------------------------------- real launches
def train_on_streams(cases: list[dict], split_batches: bool, dispatch_batches: bool) -> list[dict]:
    """For each case: train a DDP model on the stream (a gradient all-reduce every step: a rank with
    one step fewer leaves the others hanging) and gather the sample ids for metrics."""
    config = DataLoaderConfiguration(split_batches=split_batches, dispatch_batches=dispatch_batches)
    acc = Accelerator(dataloader_config=config)
    torch.manual_seed(0)
    model = nn.Linear(1, 1)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))
    results = []
    for case in cases:
        stream = (SizedStream if case.get("sized") else Stream)(case["n"], case.get("split_by_worker", False))
        loader = acc.prepare(
            DataLoader(
                stream,
                batch_size=case.get("batch_size", 4),
                drop_last=case.get("drop_last", False),
                num_workers=case.get("num_workers", 0),
            )
        )
        steps, seen = 0, []
        for batch in loader:
            acc.backward(model(batch / 64).pow(2).mean())  # inputs kept small: 40 streams, no divergence
            opt.step()
            opt.zero_grad()
            seen.append(acc.gather_for_metrics(batch))
            steps += 1
        gathered = torch.cat(seen).flatten().long().tolist() if seen else []
        results.append(
            {"steps": steps, "gathered": gathered, "len": len(loader) if case.get("sized") else None}
        )
    results.append({"weight": model.module.weight.detach().clone()})
    acc.end_training()
    return results


def _launch(world: int, cases: list[dict], split_batches: bool = False, dispatch_batches: bool = True):
    result = notebook_launch(
        train_on_streams,
        args=(cases, split_batches, dispatch_batches),
        num_processes=world,
        quiet=True,
        timeout=120,
    )
    for rank in range(1, world):  # every rank took every step: DDP kept the weights identical
        assert torch.equal(result[rank][-1]["weight"], result[0][-1]["weight"])
    return [[result[rank][i] for rank in range(world)] for i in range(len(cases))]


MODES = pytest.mark.parametrize(
    "dispatch", [True, False], ids=["dispatched (the default)", "every rank reads (dispatch_batches=False)"]
)


@MODES
@pytest.mark.parametrize("world", [2, 3])
def test_training_on_streams_of_every_length_from_1_to_40(world, dispatch):
    cases = [dict(n=n, sized=(n % 2 == 0)) for n in LENGTHS]
    extra = [dict(n=13, drop_last=True), dict(n=17, num_workers=2, split_by_worker=True)]
    *plain, dropped, workers = _launch(world, cases + extra, dispatch_batches=dispatch)
    for case, ranks in zip(cases, plain, strict=True):
        n = case["n"]
        want_steps = -(-n // (4 * world))
        for got in ranks:
            assert got["steps"] == want_steps, (n, got)
            assert got["gathered"] == list(range(n)), n  # exactly the stream: wrapped repeats dropped
            if case["sized"]:
                assert got["len"] == want_steps
    # drop_last: the dispatcher drops the loader's short batch (12 samples left, in rounds of full
    # batches), IterableDatasetShard the incomplete round of batch_size x processes
    kept = 12 if dispatch else 13 // (4 * world) * 4 * world
    for got in dropped:
        assert got["steps"] == -(-kept // (4 * world)) and got["gathered"] == list(range(kept))
    for got in workers:  # read by 2 DataLoader workers, each its half of the stream
        assert got["steps"] == -(-17 // (4 * world)) and sorted(got["gathered"]) == list(range(17))


@MODES
def test_split_batches_in_a_launch(dispatch):
    cases = [dict(n=13, sized=True), dict(n=13, drop_last=True)]
    split, dropped = _launch(2, cases, split_batches=True, dispatch_batches=dispatch)
    for got in split:  # each batch of 4 is split in two: 4 rounds, the last with 1 genuine sample
        assert got["steps"] == 4 and got["len"] == 4 and got["gathered"] == list(range(13))
    for got in dropped:
        assert got["steps"] == 3 and got["gathered"] == list(range(12))


class CountedStream(Stream):
    """A Stream that counts the samples this process iterated."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.read = 0

    def __iter__(self):
        for sample in super().__iter__():
            self.read += 1
            yield sample


def read_on_a_tp_mesh(n: int) -> dict:
    """A stream dispatched on a tp=2 mesh (one data rank): what this process read and received."""
    from notebook_launcher import ParallelismConfig

    acc = Accelerator(parallelism_config=ParallelismConfig(tp_size=2))
    stream = CountedStream(n)
    batches = [batch.flatten().tolist() for batch in acc.prepare(DataLoader(stream, batch_size=4))]
    return {"read": stream.read, "batches": batches}


def test_a_dispatched_stream_is_read_by_process_zero_alone_on_a_mesh():
    """tp peers share one data rank: process 0 reads the stream, its peer receives the same batches
    (it once read the stream too: dispatch checked the data rank, not the process)."""
    result = notebook_launch(read_on_a_tp_mesh, args=(10,), num_processes=2, quiet=True, timeout=120)
    assert [r["read"] for r in result] == [10, 0]
    assert result[0]["batches"] == result[1]["batches"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
