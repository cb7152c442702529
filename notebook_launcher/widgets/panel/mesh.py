"""The panel's mesh control (ParallelismConfig sizes, their product checked against the process
count before launch) and the mesh grid the panel and the RunView draw: which ranks hold which piece
of a split layer, which share data."""

from __future__ import annotations

import html
from typing import Any, cast

import ipywidgets as widgets

from ...config import LaunchConfig
from ...config.parallelism import from_section, mesh_coordinates
from ...config.pipeline import SCHEDULES
from ...errors import ConfigError
from .fields import Field

_PREFIX = "parallelism_config.parallelism_config_"
_SIZES = (
    ("pp_size", "pipeline stages"),
    ("dp_replicate_size", "data replicas"),
    ("dp_shard_size", "FSDP2 shards"),
    ("tp_size", "tensor parallel"),
)
_SHARD_COLOURS = ("#dbeafe", "#dcfce7", "#fef9c3", "#fce7f3", "#ede9fe", "#ffedd5", "#e0f2fe", "#f1f5f9")


class MeshSection:
    """pp x dp_replicate x dp_shard x tp; all 1 means no mesh (the strategy buttons decide)."""

    def __init__(self) -> None:
        self.sizes = {
            name: Field(_PREFIX + name, label, widgets.IntText(1, layout=widgets.Layout(width="120px")))
            for name, label in _SIZES
        }
        self.schedule = Field(  # used when pp_size > 1
            _PREFIX + "pp_schedule",
            "pipeline schedule",
            widgets.Dropdown(options=list(SCHEDULES), value="1f1b", layout=widgets.Layout(width="180px")),
        )
        self.microbatches = Field(
            _PREFIX + "pp_n_microbatches",
            "micro-batches",
            widgets.IntText(0, layout=widgets.Layout(width="120px")),
            help="each batch is cut into this many (0: the number of stages)",
        )
        self.virtual_stages = Field(
            _PREFIX + "pp_virtual_stages",
            "stages per rank",
            widgets.IntText(0, layout=widgets.Layout(width="120px")),
            help="virtual_stages for the looped/interleaved schedules (0: the schedule's default)",
        )
        self.split_points = Field(
            _PREFIX + "pp_split_points",
            "split points",
            widgets.Text("", placeholder="layers.4, layers.8", layout=widgets.Layout(width="240px")),
            help="block names where new stages begin, comma-separated (empty: an even split)",
        )
        self.fields = [
            *self.sizes.values(),
            self.schedule,
            self.microbatches,
            self.virtual_stages,
            self.split_points,
        ]
        self.grid = widgets.HTML("")
        self.box = widgets.VBox(
            [widgets.HTML("<b>Mesh</b> (ParallelismConfig: stages × replicas × shards × tensor parallel)")]
            + [f.box for f in self.fields]
            + [self.grid]
        )
        self.box.add_class("nl-mesh-section")

    def load(self, config: LaunchConfig) -> None:
        section = config.parallelism_config or {}
        for name, field in self.sizes.items():
            field.widget.value = int(section.get(f"parallelism_config_{name}", 1))
        self.schedule.widget.value = section.get("parallelism_config_pp_schedule", "1f1b")
        self.microbatches.widget.value = int(section.get("parallelism_config_pp_n_microbatches") or 0)
        self.virtual_stages.widget.value = int(section.get("parallelism_config_pp_virtual_stages") or 0)
        points = section.get("parallelism_config_pp_split_points") or []
        self.split_points.widget.value = points if isinstance(points, str) else ", ".join(points)

    def read(self, processes: int) -> dict[str, Any]:
        """{"parallelism_config": section}; a ConfigError on the tp field when the product is not the
        number of processes (shown next to it before anything launches)."""
        values = {name: field.widget.value for name, field in self.sizes.items()}
        for name, value in values.items():
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{_PREFIX}{name}={value!r} must be a whole number >= 1.")
        if all(v == 1 for v in values.values()):
            self.grid.value = ""
            return {"parallelism_config": {}}
        product = (
            values["pp_size"] * values["dp_replicate_size"] * values["dp_shard_size"] * values["tp_size"]
        )
        if product != processes:
            self.grid.value = ""
            stages = f"stages {values['pp_size']} × " if values["pp_size"] > 1 else ""
            raise ConfigError(
                f"{_PREFIX}tp_size={values['tp_size']}: {stages}replicas {values['dp_replicate_size']} × shards "
                f"{values['dp_shard_size']} × tensor parallel {values['tp_size']} = {product}, but processes = "
                f"{processes}. Make the product equal the number of processes."
            )
        section: dict[str, Any] = {f"parallelism_config_{name}": value for name, value in values.items()}
        if values["pp_size"] > 1:
            section["parallelism_config_pp_schedule"] = self.schedule.widget.value
            if self.microbatches.widget.value:
                section["parallelism_config_pp_n_microbatches"] = self.microbatches.widget.value
            if self.virtual_stages.widget.value:
                section["parallelism_config_pp_virtual_stages"] = self.virtual_stages.widget.value
            points = [p.strip() for p in str(self.split_points.widget.value).split(",") if p.strip()]
            if points:
                section["parallelism_config_pp_split_points"] = points
            try:
                from_section(section)
            except ConfigError as error:  # shown beside the field it names, before anything launches
                self.grid.value = ""
                field = next(
                    (k for k in ("split_points", "virtual_stages") if k in str(error)), "n_microbatches"
                )
                raise ConfigError(f"{_PREFIX}pp_{field}: {error}") from None
        self.grid.value = mesh_grid_html(section, processes)
        return {"parallelism_config": section}


def mesh_grid_html(section: dict[str, Any], world_size: int) -> str:
    """A table of ranks: one row per data-parallel group (same batches along a row), one column per
    tensor-parallel rank (the same piece of every split layer down a column), one colour per FSDP2
    shard index. '' when the section asks for no mesh or does not fit the world size."""
    if not section:
        return ""
    try:
        config = from_section(section)
        config.check_world_size(world_size)
    except ConfigError:
        return ""
    rows: dict[tuple[int, int, int, int], list[dict[str, int]]] = {}
    for coords in mesh_coordinates(config, world_size):
        key = (coords["pp"], coords["dp_replicate"], coords["dp_shard"], coords["cp"])
        rows.setdefault(key, []).append(coords)
    head = "".join(f"<th>tp {t}</th>" for t in range(cast(int, config.tp_size)))  # set by __post_init__
    body = []
    for (stage, replica, shard, _cp), cells in rows.items():
        colour = _SHARD_COLOURS[shard % len(_SHARD_COLOURS)]
        tds = "".join(f'<td style="background:{colour};padding:2px 8px">rank {c["rank"]}</td>' for c in cells)
        where = (f"stage {stage} · " if config.pp_enabled else "") + f"replica {replica} · shard {shard}"
        body.append(f"<tr><th>{where}</th>{tds}</tr>")
    caption = (
        "same row: one tensor-parallel group, same batches · same column: the same piece of each "
        "split layer · colour: the FSDP2 shard it holds of the rest"
    )
    return (
        f'<table class="nl-mesh-grid"><tr><th></th>{head}</tr>{"".join(body)}</table>'
        f"<small>{html.escape(caption)}</small>"
    )
