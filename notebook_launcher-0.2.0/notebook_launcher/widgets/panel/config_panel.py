"""ConfigPanel: build a LaunchConfig by pointing and clicking, save it, launch with it.

    panel = ConfigPanel(model=model, fn=train)   # display it; pick strategy/precision; press Launch
    panel.config                                 # the LaunchConfig the widgets show
    result = panel.launch(train, 1e-3)           # blocking launch with a live RunView

Invalid settings are shown next to the field that causes them; `panel.config` then raises a
ConfigError listing them, and Save / Launch refuse with the same message.
"""

from __future__ import annotations

import html
import os
import threading
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from ...config import LaunchConfig, default_config_path, load_config, resolve_config, save_config
from ...errors import ConfigError
from ...launch.events import RunFinished
from ...system.hardware import HardwareInfo, detect
from ..view.run_view import RunView
from .checks import check_combinations, field_of, summary_html, unsupported_precisions
from .choices import ChoiceButtons
from .fields import Field, key_of_error, parse_optional_int, text_value
from .mesh import MeshSection
from .sections import DeepSpeedSection, FSDPSection, MachinesSection, hardware_html
from .where import WhereSection

STRATEGIES = [("auto", None), ("single", "NO"), ("DDP", "DDP"), ("FSDP", "FSDP"), ("DeepSpeed", "DEEPSPEED")]
PRECISIONS = [("no", "no"), ("fp16", "fp16"), ("bf16", "bf16"), ("fp8", "fp8")]


class ConfigPanel(widgets.VBox):
    """A form over LaunchConfig showing this machine's hardware, with Save and Launch."""

    def __init__(
        self,
        config: LaunchConfig | dict | str | os.PathLike[str] | None = None,
        *,
        model: Any = None,
        fn: Any = None,
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
        hardware: HardwareInfo | None = None,
        save_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.hardware = hardware if hardware is not None else detect()
        self._base = resolve_config(config)
        self.fn, self.args, self.kwargs = fn, tuple(args), dict(kwargs or {})
        self.handle: Any = None
        self.view: RunView | None = None
        self.errors: dict[str, str] = {}
        self.warnings: dict[str, str] = {}
        self._loading = False
        self._load_warnings: dict[str, str] = {}

        self.strategy = Field("distributed_type", "strategy", ChoiceButtons(STRATEGIES, value=None))
        self.precision = Field(
            "mixed_precision",
            "mixed precision",
            ChoiceButtons(PRECISIONS, value="no", disabled=unsupported_precisions(self.hardware)),
        )
        cpu_help = "" if self.hardware.has_cuda else "no CUDA GPU found: the run uses CPUs anyway"
        self.use_cpu = Field(
            "use_cpu",
            "CPU only",
            widgets.Checkbox(indent=False, disabled=not self.hardware.has_cuda, tooltip=cpu_help),
        )
        self.processes = Field(
            "num_processes", "processes", widgets.IntText(1, layout=widgets.Layout(width="120px"))
        )
        self.grad_accum = Field(
            "gradient_accumulation_steps",
            "grad accumulation",
            widgets.IntText(1, layout=widgets.Layout(width="120px")),
        )
        self.seed = Field(
            "seed", "seed", widgets.Text(placeholder="none", layout=widgets.Layout(width="120px"))
        )
        self.restarts = Field(  # max_restarts: the run survives a killed rank (README: Long runs)
            "max_restarts", "restarts", widgets.IntText(0, layout=widgets.Layout(width="120px"))
        )
        self.stall = Field(  # stall_timeout: a hang report after that long without progress; 0: none
            "stall_timeout",
            "hang report after (s)",
            widgets.FloatText(300.0, layout=widgets.Layout(width="120px")),
        )
        self.fsdp = FSDPSection(model)
        self.deepspeed = DeepSpeedSection()
        self.machines = MachinesSection()
        self.where = WhereSection()
        self.mesh = MeshSection()
        self.main_fields = [
            self.strategy,
            self.precision,
            self.use_cpu,
            self.processes,
            self.grad_accum,
            self.seed,
            self.restarts,
            self.stall,
        ]
        self.fields = {
            f.key: f
            for f in self.main_fields
            + self.fsdp.fields
            + self.deepspeed.fields
            + self.machines.fields
            + self.where.fields
            + self.mesh.fields
        }

        self.summary = widgets.HTML()
        self.summary.add_class("nl-summary")
        path = (
            save_path
            if save_path is not None
            else (config if isinstance(config, (str, os.PathLike)) else None)
        )
        self.save_path = widgets.Text(
            str(path or default_config_path()), layout=widgets.Layout(width="420px")
        )
        self.save_button = widgets.Button(
            description="Save", icon="save", tooltip="Write this config as YAML"
        )
        self.save_button.on_click(lambda _b: self._save_clicked())
        self.launch_button = widgets.Button(description="Launch", icon="play", button_style="success")
        self.launch_button.on_click(lambda _b: self._launch_clicked())
        self.launch_button.layout.display = "" if fn is not None else "none"
        self.message = widgets.HTML()
        self.message.add_class("nl-message")
        self.run_area = widgets.VBox()

        self._load(self._base)
        for key, field in self.fields.items():
            field.widget.observe(lambda _change, key=key: self._changed(key), names="value")
        super().__init__(
            [
                widgets.HTML(hardware_html(self.hardware)),
                *[f.box for f in self.main_fields],
                self.fsdp.box,
                self.deepspeed.box,
                self.mesh.box,
                self.where.box,
                self.machines.box,
                self.summary,
                widgets.HBox(
                    [widgets.Label("save to"), self.save_path, self.save_button, self.launch_button]
                ),
                self.message,
                self.run_area,
            ]
        )
        self.add_class("nl-config-panel")

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], **kwargs: Any) -> ConfigPanel:
        """A panel showing the config file at `path`; Save writes back to it."""
        return cls(config=load_config(path), save_path=path, **kwargs)

    # ----------------------------------------------------------------- config
    @property
    def config(self) -> LaunchConfig:
        """The LaunchConfig the widgets show; ConfigError listing every invalid setting."""
        self._update()
        if self.errors:
            listed = "; ".join(self.errors.values())
            raise ConfigError(f"The panel has invalid settings: {listed}. Fix them in the panel (marked ✖).")
        return self._read()

    @config.setter
    def config(self, config: LaunchConfig) -> None:
        self._load(resolve_config(config))

    def _load(self, config: LaunchConfig) -> None:
        self._base = config
        self._loading = True
        load_warnings: list[tuple[str, str]] = []
        try:
            kind = config.distributed_type
            self.strategy.widget.value = "DDP" if kind in ("MULTI_CPU", "MULTI_GPU") else kind
            if kind == "MULTI_GPU" and not self.hardware.has_cuda:
                load_warnings.append(
                    (self.strategy.key, "the config asks for MULTI_GPU; no GPU here, so DDP runs on CPU")
                )
            self.precision.widget.value = config.mixed_precision
            self.use_cpu.widget.value = bool(config.use_cpu)
            self.processes.widget.value = config.num_processes or self._default_processes()
            self.grad_accum.widget.value = config.gradient_accumulation_steps
            self.seed.widget.value = text_value(config.seed)
            self.restarts.widget.value = config.max_restarts
            self.stall.widget.value = config.stall_timeout or 0.0
            load_warnings += self.fsdp.load(config)
            self.deepspeed.load(config)
            self.machines.load(config)
            self.where.load(config)
            self.mesh.load(config)
        finally:
            self._loading = False
        self._load_warnings = dict(load_warnings)
        self._update()

    def _default_processes(self) -> int:
        return self.hardware.cuda_device_count or 1

    def _distributed_type(self) -> str | None:
        strategy = self.strategy.widget.value
        if strategy == "DDP":
            return "MULTI_GPU" if self.hardware.has_cuda and not self.use_cpu.widget.value else "MULTI_CPU"
        return strategy

    def _read_data(self) -> tuple[dict[str, Any], dict[str, str]]:
        """Widget values as a config dict, plus parse errors keyed by config path."""
        data = self._base.to_dict()
        errors: dict[str, str] = {}
        data.update(
            distributed_type=self._distributed_type(),
            mixed_precision=self.precision.widget.value,
            use_cpu=self.use_cpu.widget.value,
            num_processes=self.processes.widget.value,
            gradient_accumulation_steps=self.grad_accum.widget.value,
            max_restarts=self.restarts.widget.value,
            stall_timeout=self.stall.widget.value or None,
        )
        sections = (
            (
                "seed",
                lambda: {"seed": parse_optional_int(self.seed.widget.value, "seed", empty_means="no seed")},
            ),
            ("machines", self.machines.read),
            ("fsdp_config", self.fsdp.read),
            ("deepspeed_config", self.deepspeed.read),
            ("cluster_config", self.where.read),
            ("parallelism_config", lambda: self.mesh.read(self.processes.widget.value)),
        )
        for name, read in sections:
            try:
                values = read()
            except ConfigError as exc:
                errors[key_of_error(str(exc)) or name] = str(exc)
                continue
            if name in ("fsdp_config", "deepspeed_config", "cluster_config"):
                data[name] = {**data[name], **values}
            else:
                data.update(values)
        return data, errors

    def _read(self) -> LaunchConfig:
        data, errors = self._read_data()
        if errors:
            raise ConfigError(next(iter(errors.values())))
        return LaunchConfig.from_dict(data, source="the panel")

    # ------------------------------------------------------------- validation
    def _changed(self, key: str) -> None:
        if not self._loading:
            self._load_warnings.pop(key, None)  # a note about the loaded value, not the user's
        self._update()

    def _update(self) -> None:
        if self._loading:
            return
        data, errors = self._read_data()
        config = None
        if not errors:
            try:
                config = LaunchConfig.from_dict(data, source="the panel")
            except ConfigError as exc:
                errors[field_of(str(exc))] = str(exc)
        warnings = dict(self._load_warnings)
        if config is not None:
            reason = self.precision.widget.reason(config.mixed_precision)
            combo_errors, combo_warnings = check_combinations(config, self.hardware, reason)
            errors.update(combo_errors)
            warnings.update(combo_warnings)
        self.errors, self.warnings = errors, warnings
        for key, field in self.fields.items():
            field.show(errors.get(key), warnings.get(key))
        strategy = self.strategy.widget.value
        self.fsdp.box.layout.display = "" if strategy == "FSDP" else "none"
        self.deepspeed.box.layout.display = "" if strategy == "DEEPSPEED" else "none"
        self.launch_button.disabled = bool(errors) or self._running()
        self.summary.value = summary_html(config, errors, self.fields)

    # ------------------------------------------------------------ save, launch
    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the config as YAML (the file the CLI and notebook_launch read); returns the path."""
        target = Path(path if path is not None else self.save_path.value).expanduser()
        written = save_config(self.config, target)
        self._say(f"Saved to {written}")
        return written

    def launch(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` on every process with this config; blocks, shows a RunView.

        Returns the LaunchResult; a failed run raises like notebook_launch does.
        """
        from IPython.display import display

        from ...launch import notebook_launch

        config = self.config
        view = self._new_view(show_in_panel=False)
        display(view)
        try:
            return notebook_launch(
                fn, args, kwargs, config=config, observers=[view], poll_hooks=[view.poll], quiet=True
            )
        except Exception as exc:
            view.show_error(exc)
            raise

    def start(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Start `fn` in the background (what the Launch button does); returns the RunHandle."""
        from ...launch import start_launch

        config = self.config
        view = self._new_view(show_in_panel=True)
        self.handle = start_launch(
            fn, args, kwargs, config=config, observers=[view, self._observe], quiet=True
        )
        view.attach(self.handle)
        threading.Thread(target=self._report, args=(self.handle, view), daemon=True).start()
        self._update()
        return self.handle

    @property
    def result(self) -> Any:
        """The LaunchResult of the last Launch-button run, None while it runs or if it failed."""
        return None if self.handle is None else self.handle.result

    def _new_view(self, show_in_panel: bool) -> RunView:
        self.view = RunView()
        if show_in_panel:
            self.run_area.children = [self.view]
        return self.view

    def _running(self) -> bool:
        return self.handle is not None and not self.handle.done

    def _observe(self, event: Any) -> None:
        if isinstance(event, RunFinished):
            self.launch_button.disabled = bool(self.errors)

    def _report(self, handle: Any, view: RunView) -> None:
        """Background-run outcome into the panel: a failure's traceback goes to the rank's pane."""
        try:
            handle.wait()
        except Exception as exc:
            view.show_error(exc)
            self._say(str(exc).splitlines()[0], error=True)

    def _save_clicked(self) -> None:
        try:
            self.save()
        except (ConfigError, OSError) as exc:
            self._say(str(exc), error=True)

    def _launch_clicked(self) -> None:
        if self._running():
            self._say("A run is still going; press Stop in its view first.", error=True)
            return
        try:
            self.start(self.fn, *self.args, **self.kwargs)
        except Exception as exc:  # shown in the panel: a click handler's traceback is invisible
            self._say(f"{type(exc).__name__}: {exc}", error=True)
            return
        self._say("Launched.")

    def _say(self, text: str, error: bool = False) -> None:
        color = "#c62828" if error else "#2e7d32"
        self.message.value = f'<span style="color:{color}">{html.escape(text)}</span>'
