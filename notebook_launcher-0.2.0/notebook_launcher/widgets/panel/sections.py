"""The parts of the ConfigPanel: hardware summary, FSDP, DeepSpeed and multi-machine sections.

Each section owns its Fields (keyed by config path), loads them from a LaunchConfig and reads
them back as plain config values.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

import ipywidgets as widgets

from ...config import LaunchConfig
from ...config.launch_config import RDZV_BACKENDS
from ...config.sections import (
    FSDP_SHARDING_STRATEGIES,
    FSDP_STATE_DICT_TYPES,
    FSDP_WRAP_POLICIES,
    OFFLOAD_DEVICES,
    ZERO_STAGES,
)
from ...system.hardware import HardwareInfo
from .fields import Field, parse_optional_float, parse_optional_int, text_value

GIB = 1024**3


def hardware_html(info: HardwareInfo) -> str:
    """What the machine has, in one small block: CPUs, GPUs (name, memory, capability), precisions."""
    gpus = (
        "".join(
            f"<li>GPU {g.index}: {html.escape(g.name)}, {g.total_memory / GIB:.1f} GiB, "
            f"compute capability {g.capability[0]}.{g.capability[1]}</li>"
            for g in info.gpus
        )
        if info.gpus
        else "<li>no CUDA GPU found: processes run on CPU (gloo)</li>"
    )
    mps = "<li>Apple MPS available</li>" if info.mps_available else ""
    supported = info.supported_precisions()
    precisions = ", ".join(
        f"{mode} ✓" if reason is None else f'<span title="{html.escape(reason)}">{mode} ✗</span>'
        for mode, reason in supported.items()
    )
    return (
        '<div class="nl-hardware"><b>This machine</b><ul style="margin:2px 0 4px 0">'
        f"<li>{info.cpu_count} CPU core(s)</li>{gpus}{mps}<li>mixed precision: {precisions}</li></ul></div>"
    )


def model_layer_classes(model: Any) -> list[tuple[str, int]]:
    """(class name, count) of the model's submodules, likely wrap units first.

    Repeated container blocks (e.g. TransformerEncoderLayer x 6) are what FSDP usually wraps, so
    they come first, outermost first; then single containers, then leaf layers.
    """
    modules = getattr(model, "modules", None)
    if modules is None:
        return []
    counts: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    has_children: dict[str, bool] = {}
    for index, module in enumerate(list(modules())[1:]):
        name = type(module).__name__
        counts[name] += 1
        first_seen.setdefault(name, index)
        has_children[name] = has_children.get(name, False) or any(True for _ in module.children())
    return sorted(
        counts.items(), key=lambda item: (not has_children[item[0]], item[1] == 1, first_seen[item[0]])
    )


def _dropdown(options: list[Any], value: Any) -> widgets.Dropdown:
    return widgets.Dropdown(options=options, value=value, layout=widgets.Layout(width="220px"))


class FSDPSection:
    """Sharding strategy, wrap policy, layer classes (from the model when given), offload, checkpointing."""

    def __init__(self, model: Any = None) -> None:
        self.model_classes = model_layer_classes(model) if model is not None else []
        self.sharding = Field(
            "fsdp_config.fsdp_sharding_strategy",
            "sharding",
            _dropdown(list(FSDP_SHARDING_STRATEGIES), "FULL_SHARD"),
        )
        self.wrap = Field(
            "fsdp_config.fsdp_auto_wrap_policy",
            "wrap policy",
            _dropdown([("none", None)] + [(p, p) for p in FSDP_WRAP_POLICIES], None),
        )
        if self.model_classes:
            layer_widget: widgets.Widget = widgets.SelectMultiple(
                options=[(f"{name} ×{count}", name) for name, count in self.model_classes],
                rows=min(6, len(self.model_classes)),
                layout=widgets.Layout(width="320px"),
            )
        else:
            layer_widget = widgets.Text(
                placeholder="e.g. TransformerEncoderLayer, Block", layout=widgets.Layout(width="320px")
            )
        self.layers = Field("fsdp_config.fsdp_transformer_layer_cls_to_wrap", "layer classes", layer_widget)
        self.min_params = Field(
            "fsdp_config.fsdp_min_num_params", "min params / unit", widgets.IntText(100_000_000)
        )
        self.offload = Field("fsdp_config.fsdp_offload_params", "CPU offload", widgets.Checkbox(indent=False))
        self.checkpointing = Field(
            "fsdp_config.fsdp_activation_checkpointing", "activation ckpt", widgets.Checkbox(indent=False)
        )
        self.state_dict = Field(
            "fsdp_config.fsdp_state_dict_type",
            "state dict",
            _dropdown(list(FSDP_STATE_DICT_TYPES), "FULL_STATE_DICT"),
        )
        self.fields = [
            self.sharding,
            self.wrap,
            self.layers,
            self.min_params,
            self.offload,
            self.checkpointing,
            self.state_dict,
        ]
        self.box = widgets.VBox([widgets.HTML("<b>FSDP</b>")] + [f.box for f in self.fields])
        self.box.add_class("nl-fsdp-section")
        self.wrap.widget.observe(lambda _change: self._show_wrap_fields(), names="value")
        self._show_wrap_fields()

    def _show_wrap_fields(self) -> None:
        policy = self.wrap.widget.value
        self.layers.box.layout.display = "" if policy == "TRANSFORMER_BASED_WRAP" else "none"
        self.min_params.box.layout.display = "" if policy == "SIZE_BASED_WRAP" else "none"

    def load(self, config: LaunchConfig) -> list[tuple[str, str]]:
        """Show the config's FSDP settings; returns warnings (layer classes the model lacks)."""
        fsdp = config.fsdp_config
        self.sharding.widget.value = fsdp.fsdp_sharding_strategy
        self.wrap.widget.value = fsdp.fsdp_auto_wrap_policy
        self.min_params.widget.value = int(fsdp.fsdp_min_num_params)
        self.offload.widget.value = bool(fsdp.fsdp_offload_params)
        self.checkpointing.widget.value = bool(fsdp.fsdp_activation_checkpointing)
        self.state_dict.widget.value = fsdp.fsdp_state_dict_type
        names = fsdp.layer_classes()
        if isinstance(self.layers.widget, widgets.SelectMultiple):
            known = [name for name, _ in self.model_classes]
            missing = [name for name in names if name not in known]
            if missing:
                # keep them selectable rather than dropping them silently
                self.layers.widget.options = list(self.layers.widget.options) + [
                    (f"{n} (not in model)", n) for n in missing
                ]
            self.layers.widget.value = tuple(names)
            if missing:
                return [(self.layers.key, f"{', '.join(missing)} not found in the given model")]
        else:
            self.layers.widget.value = ", ".join(names)
        return []

    def read(self) -> dict[str, Any]:
        """The fsdp_config values the widgets show."""
        widget = self.layers.widget
        layers = (
            ",".join(widget.value) if isinstance(widget, widgets.SelectMultiple) else widget.value.strip()
        )
        return {
            "fsdp_sharding_strategy": self.sharding.widget.value,
            "fsdp_auto_wrap_policy": self.wrap.widget.value,
            "fsdp_transformer_layer_cls_to_wrap": layers or None,
            "fsdp_min_num_params": self.min_params.widget.value,
            "fsdp_offload_params": self.offload.widget.value,
            "fsdp_activation_checkpointing": self.checkpointing.widget.value,
            "fsdp_state_dict_type": self.state_dict.widget.value,
        }


class DeepSpeedSection:
    """ZeRO stage, optimizer / parameter offload, gradient clipping, or a DeepSpeed JSON file."""

    def __init__(self) -> None:
        self.stage = Field("deepspeed_config.zero_stage", "ZeRO stage", _dropdown(list(ZERO_STAGES), 2))
        self.offload_optimizer = Field(
            "deepspeed_config.offload_optimizer_device",
            "offload optimizer",
            _dropdown(list(OFFLOAD_DEVICES), "none"),
        )
        self.offload_param = Field(
            "deepspeed_config.offload_param_device",
            "offload params",
            _dropdown(list(OFFLOAD_DEVICES), "none"),
        )
        self.clipping = Field(
            "deepspeed_config.gradient_clipping", "gradient clipping", widgets.Text(placeholder="none")
        )
        self.config_file = Field(
            "deepspeed_config.deepspeed_config_file",
            "config file",
            widgets.Text(placeholder="optional ds_config.json", layout=widgets.Layout(width="320px")),
        )
        self.fields = [
            self.stage,
            self.offload_optimizer,
            self.offload_param,
            self.clipping,
            self.config_file,
        ]
        self.box = widgets.VBox([widgets.HTML("<b>DeepSpeed</b>")] + [f.box for f in self.fields])
        self.box.add_class("nl-deepspeed-section")

    def load(self, config: LaunchConfig) -> None:
        ds = config.deepspeed_config
        self.stage.widget.value = int(ds.zero_stage)
        self.offload_optimizer.widget.value = ds.offload_optimizer_device
        self.offload_param.widget.value = ds.offload_param_device
        self.clipping.widget.value = text_value(ds.gradient_clipping)
        self.config_file.widget.value = text_value(ds.deepspeed_config_file)

    def read(self) -> dict[str, Any]:
        """The deepspeed_config values; a bad number raises ConfigError naming its key."""
        return {
            "zero_stage": self.stage.widget.value,
            "offload_optimizer_device": self.offload_optimizer.widget.value,
            "offload_param_device": self.offload_param.widget.value,
            "gradient_clipping": parse_optional_float(
                self.clipping.widget.value, self.clipping.key, empty_means="no clipping"
            ),
            "deepspeed_config_file": self.config_file.widget.value.strip() or None,
        }


class MachinesSection:
    """Number of machines, this machine's rank, the main machine's address and port, rendezvous."""

    def __init__(self) -> None:
        self.machines = Field(
            "num_machines", "machines", widgets.IntText(1, layout=widgets.Layout(width="120px"))
        )
        self.rank = Field(
            "machine_rank", "this machine's rank", widgets.IntText(0, layout=widgets.Layout(width="120px"))
        )
        self.ip = Field("main_process_ip", "main address", widgets.Text(placeholder="IP of machine 0"))
        self.port = Field("main_process_port", "main port", widgets.Text(placeholder="auto (free port)"))
        self.rdzv = Field("rdzv_backend", "rendezvous", _dropdown(list(RDZV_BACKENDS), "static"))
        self.fields = [self.machines, self.rank, self.ip, self.port, self.rdzv]
        self.box = widgets.Accordion(
            children=[widgets.VBox([f.box for f in self.fields])], titles=("Multi-machine",)
        )
        self.box.add_class("nl-machines-section")

    def load(self, config: LaunchConfig) -> None:
        self.machines.widget.value = config.num_machines
        self.rank.widget.value = config.machine_rank
        self.ip.widget.value = text_value(config.main_process_ip)
        self.port.widget.value = text_value(config.main_process_port)
        self.rdzv.widget.value = config.rdzv_backend
        self.box.selected_index = 0 if config.num_machines > 1 else None

    def read(self) -> dict[str, Any]:
        return {
            "num_machines": self.machines.widget.value,
            "machine_rank": self.rank.widget.value,
            "main_process_ip": self.ip.widget.value.strip() or None,
            "main_process_port": parse_optional_int(
                self.port.widget.value, self.port.key, empty_means="a free port"
            ),
            "rdzv_backend": self.rdzv.widget.value,
        }
