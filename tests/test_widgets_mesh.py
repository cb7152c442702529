"""The panel's mesh control and the run view's mesh grid (issue 27): sizes against the process
count, marked invalid before launch; the grid says which ranks share data and which hold which piece."""

from notebook_launcher import ConfigPanel, RunView
from notebook_launcher.launch.events import RunStarted
from notebook_launcher.system.hardware import HardwareInfo

CPU_ONLY = HardwareInfo(cpu_count=4)


def test_mesh_sizes_are_checked_against_the_processes():
    panel = ConfigPanel(config={}, hardware=CPU_ONLY)
    panel.processes.widget.value = 4
    panel.mesh.sizes["tp_size"].widget.value = 2
    key = "parallelism_config.parallelism_config_tp_size"
    assert key in panel.errors and "= 2, but processes = 4" in panel.errors[key]
    assert panel.launch_button.disabled
    panel.mesh.sizes["dp_shard_size"].widget.value = 2
    assert not panel.errors
    config = panel.config
    assert config.parallelism_config["parallelism_config_tp_size"] == 2
    assert config.parallelism_config["parallelism_config_dp_shard_size"] == 2
    assert "rank 3" in panel.mesh.grid.value and "shard 1" in panel.mesh.grid.value
    again = ConfigPanel(config=config, hardware=CPU_ONLY)
    assert again.mesh.sizes["tp_size"].widget.value == 2 and not again.errors


def test_run_view_draws_the_mesh_as_a_grid():
    panel = ConfigPanel(config={"num_processes": 4}, hardware=CPU_ONLY)
    panel.mesh.sizes["tp_size"].widget.value = 2
    panel.mesh.sizes["dp_shard_size"].widget.value = 2
    view = RunView()
    view(RunStarted(world_size=4, local_ranks=(0, 1, 2, 3), start_method="fork", config=panel.config))
    grid = view.mesh_grid.value
    assert view.mesh_grid.layout.display == ""
    assert grid.count("<tr>") == 3 and "<th>tp 1</th>" in grid  # a header, two tensor-parallel pairs
    assert (
        grid.index("rank 0") < grid.index("rank 1") < grid.index("replica 0 · shard 1") < grid.index("rank 2")
    )
    plain = RunView()
    plain(
        RunStarted(
            world_size=2,
            local_ranks=(0, 1),
            start_method="fork",
            config=ConfigPanel(hardware=CPU_ONLY).config,
        )
    )
    assert plain.mesh_grid.layout.display == "none"


def test_pipeline_stages_in_the_mesh_section():
    """Issue 35: pp_size is part of the product; the grid names each row's stage."""
    panel = ConfigPanel(config={}, hardware=CPU_ONLY)
    panel.processes.widget.value = 4
    panel.mesh.sizes["pp_size"].widget.value = 2
    key = "parallelism_config.parallelism_config_tp_size"
    assert "stages 2 × replicas 1 × shards 1 × tensor parallel 1 = 2, but processes = 4" in panel.errors[key]
    panel.mesh.sizes["dp_shard_size"].widget.value = 2
    assert not panel.errors
    assert panel.config.parallelism_config["parallelism_config_pp_size"] == 2
    grid = panel.mesh.grid.value
    panel.mesh.schedule.widget.value = "interleaved_1f1b"
    panel.mesh.microbatches.widget.value = 3
    key = "parallelism_config.parallelism_config_pp_n_microbatches"
    assert "n_microbatches=3 must be a multiple of pp_size=2" in panel.errors[key]
    panel.mesh.microbatches.widget.value = 4
    assert not panel.errors
    section = panel.config.parallelism_config
    assert section["parallelism_config_pp_schedule"] == "interleaved_1f1b"
    assert section["parallelism_config_pp_n_microbatches"] == 4
    again = ConfigPanel(config=panel.config, hardware=CPU_ONLY)
    assert (
        again.mesh.schedule.widget.value == "interleaved_1f1b" and again.mesh.microbatches.widget.value == 4
    )
    # stages per rank and split points: each error beside its own field; the values round-trip
    panel.mesh.split_points.widget.value = "layers.1"
    key = "parallelism_config.parallelism_config_pp_split_points"
    assert "names 1 cut(s), but pp_size=2 x virtual_stages=2 = 4 stages need 3" in panel.errors[key]
    panel.mesh.split_points.widget.value = "layers.1, layers.2,layers.3"
    assert not panel.errors
    assert panel.config.parallelism_config["parallelism_config_pp_split_points"] == [
        "layers.1",
        "layers.2",
        "layers.3",
    ]
    panel.mesh.schedule.widget.value = "zbv_zero_bubble"
    panel.mesh.virtual_stages.widget.value = 3
    key = "parallelism_config.parallelism_config_pp_virtual_stages"
    assert "(a V); virtual_stages=3 must be 2" in panel.errors[key]
    panel.mesh.virtual_stages.widget.value = 2
    assert not panel.errors
    again = ConfigPanel(config=panel.config, hardware=CPU_ONLY)
    assert again.mesh.virtual_stages.widget.value == 2
    assert again.mesh.split_points.widget.value == "layers.1, layers.2, layers.3"
    assert grid.index("stage 0 · replica 0 · shard 0") < grid.index("stage 1 · replica 0 · shard 1")
    assert grid.index("stage 1 · replica 0 · shard 0") < grid.index("rank 2") < grid.index("rank 3")
