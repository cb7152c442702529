"""Where a launch runs, without starting a cluster: the `cluster_config` section (YAML round trip,
bad values), which cluster `notebook_launch(cluster=...)` picks (argument > config file), the
arguments that cannot go with a cluster, and the ConfigPanel's "where" section."""

from __future__ import annotations

import re

import pytest

from notebook_launcher import ConfigError, LaunchConfig, RayCluster, SlurmCluster, load_config, save_config
from notebook_launcher.clusters.launching import resolve_cluster
from notebook_launcher.widgets import ConfigPanel


def test_a_cluster_section_survives_a_yaml_round_trip(tmp_path):
    config = LaunchConfig(
        num_processes=4,
        cluster_config={
            "cluster_type": "slurm",
            "num_nodes": 2,
            "slurm_partition": "gpu",
            "slurm_time": 30,
            "slurm_setup": "source ~/venv/bin/activate\nmodule load cuda",
        },
    )
    path = save_config(config, tmp_path / "where.yaml")
    assert "cluster_config:" in path.read_text() and "slurm_partition: gpu" in path.read_text()
    again = load_config(path)
    assert again.cluster_config == config.cluster_config
    assert again.cluster_config.slurm_setup == ["source ~/venv/bin/activate", "module load cuda"]
    # This machine: no section written, so Accelerate's own tools read the file as before.
    assert "cluster_config" not in save_config(LaunchConfig(), tmp_path / "local.yaml").read_text()


@pytest.mark.parametrize(
    "section, named",
    [
        ({"cluster_type": "kubernetes"}, "cluster_config.cluster_type='kubernetes'"),
        ({"num_nodes": 0}, "cluster_config.num_nodes=0"),
        ({"slurm_time": 0}, "cluster_config.slurm_time=0"),
        ({"ray_resources_per_worker": "CPU=two"}, "CPU='two' is not a number"),
        ({"ray_resources_per_worker": "CPU"}, "write it as CPU=1, GPU=1"),
        ({"slurm_setup": 3}, "must be a list of shell commands"),
        ({"slurm_partiton": "gpu"}, "Did you mean 'slurm_partition'"),
    ],
)
def test_bad_cluster_settings_name_the_key(section, named):
    with pytest.raises(ConfigError, match=None) as caught:
        LaunchConfig(cluster_config=section)
    assert named in str(caught.value)


def test_the_argument_wins_over_the_config_file():
    config = LaunchConfig(cluster_config={"cluster_type": "slurm", "num_nodes": 3, "slurm_partition": "p"})
    from_file = resolve_cluster(None, config)
    assert isinstance(from_file, SlurmCluster) and from_file.nodes == 3 and from_file.partition == "p"
    assert resolve_cluster("local", config) is None
    ray = resolve_cluster("ray", config)
    assert isinstance(ray, RayCluster) and ray.num_nodes == 3
    given = RayCluster(address="ray://head:10001", resources_per_worker={"CPU": 2})
    assert resolve_cluster(given, config) is given
    assert resolve_cluster(None, LaunchConfig()) is None


def test_bad_cluster_arguments_are_clear():
    with pytest.raises(ConfigError, match="cluster='rey' is not valid.*Did you mean 'ray'"):
        resolve_cluster("rey", LaunchConfig())
    with pytest.raises(ConfigError, match="num_nodes"):
        RayCluster(num_nodes=0)
    with pytest.raises(ConfigError, match="resources_per_worker"):
        RayCluster(resources_per_worker={"GPU": -1})
    with pytest.raises(ConfigError, match="time"):
        SlurmCluster(time=0)


def test_what_a_cluster_decides_cannot_be_passed_too():
    from notebook_launcher import notebook_launch

    with pytest.raises(ConfigError, match="master_addr cannot be combined with cluster="):
        notebook_launch(print, cluster=SlurmCluster(), master_addr="10.0.0.1")
    with pytest.raises(ConfigError, match="start_method='spawn' cannot be applied with cluster="):
        notebook_launch(print, cluster="ray", start_method="spawn")
    with pytest.raises(ConfigError, match="in_process=True"):
        notebook_launch(print, cluster="slurm", in_process=True)


def test_the_panel_where_section_builds_and_loads_the_cluster_config(tmp_path):
    panel = ConfigPanel()
    where = panel.where
    assert where.partition.box.layout.display == "none"  # this machine: no engine fields
    where.where.widget.value = "slurm"
    assert where.partition.box.layout.display == "" and where.ray_address.box.layout.display == "none"
    where.nodes.widget.value = 2
    where.partition.widget.value = "gpu"
    where.setup.widget.value = "source ~/venv/bin/activate"
    panel.processes.widget.value = 4  # all ranks: 2 per node (more than this machine's CPUs is fine)
    config = panel.config
    assert config.cluster_config.cluster_type == "slurm" and config.cluster_config.num_nodes == 2
    assert config.cluster_config.slurm_setup == ["source ~/venv/bin/activate"]
    assert "on 2 SLURM node(s)" in panel.summary.value

    panel.processes.widget.value = 3
    assert "must divide over the 2 nodes" in panel.errors["num_processes"]
    panel.processes.widget.value = 4
    where.where.widget.value = "ray"
    where.ray_resources.widget.value = "CPU=1, GPU=lots"
    assert "GPU='lots' is not a number" in panel.errors["cluster_config.ray_resources_per_worker"]
    assert "✖" in where.ray_resources.message.value  # shown next to the field
    where.ray_resources.widget.value = "CPU=1, GPU=1"

    saved = panel.save(tmp_path / "ray.yaml")  # the panel's file, reused by notebook_launch
    reloaded = ConfigPanel.from_yaml(saved)
    assert reloaded.where.where.widget.value == "ray"
    assert reloaded.where.ray_resources.widget.value == "CPU=1, GPU=1"
    assert isinstance(resolve_cluster(None, load_config(saved)), RayCluster)


def test_the_cli_says_a_panel_saved_cluster_is_for_notebooks(tmp_path):
    """A config file with a cluster section still launches scripts on this machine, saying so."""
    from types import SimpleNamespace

    from notebook_launcher.cli.flags import launch_parser
    from notebook_launcher.cli.resolve import resolve_launch_config

    path = save_config(
        LaunchConfig(num_processes=2, cluster_config={"cluster_type": "ray"}), tmp_path / "c.yaml"
    )
    args = launch_parser().parse_args(["--config_file", str(path), "s.py"])
    cpu_only = SimpleNamespace(cuda_device_count=0, fp8_supported=False, bf16_supported=True)
    request, source = resolve_launch_config(args, hardware=cpu_only)
    assert request.config.num_processes == 2
    assert any("cluster_config (ray) is for notebook_launch" in note for note in source.notes)


@pytest.mark.parametrize("cluster", [None, RayCluster(address="127.0.0.1:1")])
@pytest.mark.parametrize(
    "fn, args, timeout, message",
    [
        ("train.py", (), None, "needs a function to run; got str 'train.py'"),
        (print, 3, None, "args must be a tuple of positional arguments; got int. Use args=(x,)"),
        (print, (), -1, "timeout=-1 must be a positive number of seconds"),
    ],
)
def test_a_bad_call_is_named_before_anything_starts_here_or_on_a_cluster(cluster, fn, args, timeout, message):
    # the same check for local and cluster launches; a cluster is never contacted (nothing listens at :1)
    from notebook_launcher import notebook_launch

    with pytest.raises(ConfigError, match=re.escape(message)):
        notebook_launch(fn, args=args, num_processes=2, timeout=timeout, cluster=cluster, quiet=True)


# ---------------------------------------------------------------------------------------------------
# What a cluster node relays to the notebook: every event of the ranks, from one table (issue 36: the
# checkpoint events were missing from the node's own list).

_SAMPLES = {  # one event of each kind the ranks produce, as a local launch's inbox makes them
    "OutputLine": dict(rank=1, stream="stderr", text="a line"),
    "WorkerDisplay": dict(rank=1, data={"text/plain": "x"}, metadata={}, display_id="d", update=True),
    "BarUpdate": dict(rank=0, bar=1, desc="train", n=3.0, total=10.0, stats="3/10", text="train 3/10"),
    "MetricLogged": dict(rank=0, step=4, values={"loss": 0.5}, time=12.5),
    "ProgressUpdate": dict(rank=1, step=3, total=8, time=12.5, epoch=0),
    "StepsMeasured": dict(rank=0, figures={"steps": 3, "compute_s": 0.25}),
    "MemorySampled": dict(rank=1, sample={"time": 12.5, "rss": 1000, "used": 5, "limit": 10}),
    "MemoryWarning": dict(rank=0, text="memory is running out"),
    "CheckpointWriting": dict(
        rank=1, step=7, path="/p/checkpoint_2", written_bytes=10, staged_bytes=20, state="writing", time=12.5
    ),
    "CheckpointSaved": dict(path="/p/checkpoint_2", step=7, blocked_s=0.01, total_s=0.5, background=True),
}


def _event_classes():
    import dataclasses

    from notebook_launcher.launch import events

    return {
        obj
        for obj in vars(events).values()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == events.__name__
    }


def test_every_launch_event_is_either_relayed_from_a_node_or_the_launchers_own():
    """A new event class must be put in one of the two tables of launch/events.py; every one the
    inbox makes from the ranks' pipes must be in WORKER_EVENTS, which cluster nodes relay."""
    import ast
    from pathlib import Path

    from notebook_launcher.launch import events
    from notebook_launcher.launch.events import LAUNCHER_EVENTS, WORKER_EVENTS

    relayed, own = set(WORKER_EVENTS), set(LAUNCHER_EVENTS)
    assert not relayed & own
    assert _event_classes() == relayed | own, _event_classes() ^ (relayed | own)
    supervise = Path(events.__file__).parent / "supervise"
    made_from_pipes = set()
    for module in ("inbox.py", "memory_watch.py", "display_order.py"):  # what reads the ranks' pipes
        for node in ast.walk(ast.parse((supervise / module).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "events":
                made_from_pipes |= {getattr(events, alias.name) for alias in node.names}
    made_from_pipes &= _event_classes()
    assert made_from_pipes and made_from_pipes <= relayed, made_from_pipes - relayed


def test_a_node_hands_every_ranks_event_to_the_notebook_and_keeps_the_launchers_own():
    from types import SimpleNamespace

    from notebook_launcher.clusters.node import NodeRun
    from notebook_launcher.launch import events

    assert set(_SAMPLES) == {cls.__name__ for cls in events.WORKER_EVENTS}  # a sample of each
    sent: list[object] = []
    node = SimpleNamespace(emit=sent.append)
    made = [getattr(events, name)(**fields) for name, fields in _SAMPLES.items()]
    for event in [*made, events.RunFinished("done", 1.0), events.HangReported(None)]:
        NodeRun._forward(node, event)  # type: ignore[arg-type]
    assert sent == made


def test_slurms_events_file_carries_every_ranks_event_back_unchanged(tmp_path, capsys):
    """The SLURM task writes each event (a line to its log, the rest to its events file); the
    notebook's follower reads back the same events."""
    from notebook_launcher.clusters.logs import LogFollower
    from notebook_launcher.clusters.slurm_task import SlurmNodeTask, events_path
    from notebook_launcher.launch import events

    task = SlurmNodeTask.__new__(SlurmNodeTask)
    task._events = open(events_path(tmp_path, "7", 0), "a", buffering=1)
    made = [getattr(events, name)(**fields) for name, fields in _SAMPLES.items()]
    for event in made:
        task._emit(event)
    task._events.close()
    out, err = capsys.readouterr()
    (tmp_path / "out").write_text(out)
    (tmp_path / "err").write_text(err)
    read, notes = LogFollower(0, tmp_path / "out", tmp_path / "err", events_path(tmp_path, "7", 0)).read()
    assert notes == []
    assert sorted(read, key=repr) == sorted(made, key=repr)


def test_a_ranks_report_read_after_the_save_was_published_does_not_bring_it_back():
    """Two nodes relay in their own order: rank 1's "written" may come after rank 0's publication."""
    from notebook_launcher.launch.cell.checkpoint_view import CheckpointBoard
    from notebook_launcher.launch.events import CheckpointSaved, CheckpointWriting

    board = CheckpointBoard()
    writing = dict(path="/p/checkpoint_0", step=3, written_bytes=5, staged_bytes=5, time=1.0)
    board.apply(CheckpointWriting(rank=0, state="written", **writing))
    board.apply(CheckpointSaved("/p/checkpoint_0", 3, 0.01, 0.2, True))
    assert not board.apply(CheckpointWriting(rank=1, state="written", **writing))
    assert board.lines() == [
        "last complete checkpoint: checkpoint_0 (step 3, training waited 0.01 s, published after 0.20 s)"
    ]
    board.apply(CheckpointWriting(rank=0, state="staged", **{**writing, "step": 6}))  # the same folder again
    assert "checkpoint_0 (step 6) being written" in board.text()
