"""Read tracker files back with each tool's own reader (TensorBoard, MLflow) or format (W&B)."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def tensorboard_scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one scalar in order, as TensorBoard shows the run folder: a step logged
    twice shows twice, unless a later writer's purge_step hid the first."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return [(event.step, event.value) for event in acc.Scalars(tag)]


def event_file_pids(run_dir: Path) -> set[int]:
    """The writer pid in every event file name (events.out.tfevents.<time>.<host>.<pid>.<n>)."""
    return {int(p.name.split(".")[-2]) for p in run_dir.rglob("events.out.tfevents.*")}


def mlflow_runs(tracking_uri: str, experiment: str) -> list:
    """(run, {metric: [(step, value), ...]}) for every run of the experiment, deleted ones included."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL)
    out = []
    for run in runs:
        history = {
            key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics
        }
        out.append((run, history))
    return out


_BLOCK = 32768  # the .wandb file is a LevelDB-style log: 32 KiB blocks of 7-byte-headed chunks


def _wandb_records(path: Path):
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # block trailer too short for a header: padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:  # full
            yield chunk
        elif kind == 2:  # first
            pending = chunk
        elif kind == 3:  # middle
            pending += chunk
        elif kind == 4:  # last
            yield pending + chunk


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)  # newer wandb writes nested_key=["loss"]


def wandb_offline_run(run_dir: Path) -> dict:
    """{"id", "project", "config", "history": [row, ...]} from one offline run folder."""
    from wandb.proto import wandb_internal_pb2 as pb

    (log,) = run_dir.glob("run-*.wandb")
    out: dict = {"history": [], "config": {}}
    for raw in _wandb_records(log):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["id"], out["project"] = record.run.run_id, record.run.project
        elif kind == "config":
            for item in record.config.update:
                out["config"][_key(item)] = json.loads(item.value_json)
        elif kind == "history":
            out["history"].append({_key(item): json.loads(item.value_json) for item in record.history.item})
    return out
