"""The ConfigPanel's "where" section: this machine, a Ray cluster or SLURM, with each engine's
fields — the `cluster_config` keys of the YAML file, so a panel-built config is saved and reused."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ...config import LaunchConfig
from .choices import ChoiceButtons
from .fields import Field, parse_optional_int, text_value

WHERE = [("this machine", "local"), ("Ray", "ray"), ("SLURM", "slurm")]


def _small(widget: widgets.Widget, width: str = "120px") -> widgets.Widget:
    widget.layout = widgets.Layout(width=width)
    return widget


class WhereSection:
    """Where the ranks run; Launch then goes to that cluster (notebook_launch's cluster=)."""

    def __init__(self) -> None:
        self.where = Field("cluster_config.cluster_type", "where", ChoiceButtons(WHERE, value="local"))
        self.nodes = Field("cluster_config.num_nodes", "nodes", _small(widgets.IntText(1)))
        self.ray_address = Field(
            "cluster_config.ray_address",
            "Ray address",
            widgets.Text(placeholder="auto, host:port or ray://host:port (empty: RAY_ADDRESS / local)"),
        )
        self.ray_resources = Field(
            "cluster_config.ray_resources_per_worker",
            "per rank",
            widgets.Text(placeholder="CPU=1, GPU=1"),
        )
        self.partition = Field(
            "cluster_config.slurm_partition", "partition", widgets.Text(placeholder="default")
        )
        self.time = Field("cluster_config.slurm_time", "time (minutes)", _small(widgets.IntText(60)))
        self.account = Field("cluster_config.slurm_account", "account", widgets.Text(placeholder="none"))
        self.gpus = Field("cluster_config.slurm_gpus_per_node", "GPUs per node", _small(widgets.IntText(0)))
        self.cpus = Field(
            "cluster_config.slurm_cpus_per_task", "CPUs per node", _small(widgets.Text(placeholder="ranks"))
        )
        self.folder = Field(
            "cluster_config.slurm_folder", "job folder", widgets.Text("notebook_launcher_jobs")
        )
        self.setup = Field(
            "cluster_config.slurm_setup",
            "setup lines",
            widgets.Textarea(placeholder="source ~/venv/bin/activate", layout=widgets.Layout(width="320px")),
        )
        self.ray_fields = [self.ray_address, self.ray_resources]
        self.slurm_fields = [
            self.partition,
            self.time,
            self.account,
            self.gpus,
            self.cpus,
            self.folder,
            self.setup,
        ]
        self.fields = [self.where, self.nodes, *self.ray_fields, *self.slurm_fields]
        self.box = widgets.VBox([widgets.HTML("<b>Where</b>")] + [f.box for f in self.fields])
        self.box.add_class("nl-where-section")
        self.where.widget.observe(lambda _change: self._show_engine_fields(), names="value")
        self._show_engine_fields()

    def _show_engine_fields(self) -> None:
        kind = self.where.widget.value
        self.nodes.box.layout.display = "" if kind != "local" else "none"
        for field in self.ray_fields:
            field.box.layout.display = "" if kind == "ray" else "none"
        for field in self.slurm_fields:
            field.box.layout.display = "" if kind == "slurm" else "none"

    def load(self, config: LaunchConfig) -> None:
        section = config.cluster_config
        self.where.widget.value = section.cluster_type
        self.nodes.widget.value = int(section.num_nodes)
        self.ray_address.widget.value = text_value(section.ray_address)
        resources = section.ray_resources_per_worker or {}
        self.ray_resources.widget.value = ", ".join(
            f"{key}={_number(value)}" for key, value in resources.items()
        )
        self.partition.widget.value = text_value(section.slurm_partition)
        self.time.widget.value = int(section.slurm_time)
        self.account.widget.value = text_value(section.slurm_account)
        self.gpus.widget.value = int(section.slurm_gpus_per_node)
        self.cpus.widget.value = text_value(section.slurm_cpus_per_task)
        self.folder.widget.value = section.slurm_folder
        self.setup.widget.value = "\n".join(section.slurm_setup)

    def read(self) -> dict[str, Any]:
        """The cluster_config values; a bad number raises ConfigError naming its key."""
        return {
            "cluster_type": self.where.widget.value,
            "num_nodes": self.nodes.widget.value,
            "ray_address": self.ray_address.widget.value.strip() or None,
            "ray_resources_per_worker": self.ray_resources.widget.value.strip() or None,
            "slurm_partition": self.partition.widget.value.strip() or None,
            "slurm_time": self.time.widget.value,
            "slurm_account": self.account.widget.value.strip() or None,
            "slurm_gpus_per_node": self.gpus.widget.value,
            "slurm_cpus_per_task": parse_optional_int(
                self.cpus.widget.value, self.cpus.key, empty_means="one CPU per rank"
            ),
            "slurm_folder": self.folder.widget.value.strip() or "notebook_launcher_jobs",
            "slurm_setup": self.setup.widget.value,
        }


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
