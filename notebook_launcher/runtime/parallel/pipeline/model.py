"""The prepared pipeline model: this rank's stages under the model's own names, and `step()`, which
runs torch's schedule (forward and backward of every micro-batch) and returns the batch's loss on
every rank.

Data: the ranks of the first and last stages get the same batch from their loaders; a middle
stage's loader yields the batch's structure with no rows (runtime/data/stage_batches.py). `step`
passes the inputs to the first stage only and the target to the last stage only, so what a middle
stage is given (placeholders, or None) is never used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ....config.pipeline import SCHEDULES, SINGLE_STAGE, TorchPipelineParallelConfig, check_batch
from ....errors import AcceleratorError
from ...world import step_clock
from .forward_only import forward_only_losses
from .timeline import Timeline


class PipelineModel(nn.Module):
    """This rank's stage(s) of a pipeline. Its parameters and state dict keys are the original model's
    (only the blocks this rank holds). Train with `loss = model.step(inputs, target)`; calling the
    model itself is refused (a stage alone cannot compute the model's output)."""

    def __init__(
        self,
        local: nn.Sequential,
        stage_modules: Sequence[nn.Module],
        stage_ids: Sequence[int],
        *,
        n_stages: int,
        settings: TorchPipelineParallelConfig,
        pp_group: Any,
        pp_rank: int,
        pp_size: int,
        device: torch.device,
        grad_divisor: Callable[[], int],
    ) -> None:
        super().__init__()
        for name, child in local.named_children():
            self.add_module(name, child)
        # kept out of _modules: the same blocks under other roots would double the state dict
        self.__dict__["_stage_modules"] = list(stage_modules)
        self.stage_ids = list(stage_ids)
        self.n_stages = n_stages
        self.settings = settings
        self.pp_group, self.pp_rank, self.pp_size = pp_group, pp_rank, pp_size
        self.device = device
        self._grad_divisor = grad_divisor  # gradient accumulation steps
        self._schedule: Any = None
        self._loss_fn: Callable[..., Any] | None = settings.loss_fn
        self._last_rank = _stage_to_rank(settings.schedule, pp_size, n_stages)[n_stages - 1]
        self._step_losses: list[torch.Tensor] = []
        self.timeline = Timeline(
            settings.schedule,
            pp_size,
            settings.microbatches(pp_size),
            self.stage_ids,
            int(settings.virtual_stages or 1),
        )

    @property
    def stage_modules(self) -> list[nn.Module]:
        """This rank's stage modules, in stage order (the blocks they hold are this module's)."""
        return list(self.__dict__["_stage_modules"])

    @property
    def is_first(self) -> bool:
        return 0 in self.stage_ids

    @property
    def is_last(self) -> bool:
        return self.n_stages - 1 in self.stage_ids

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise AcceleratorError(
            "A pipeline-parallel model holds only its stage(s) of the model, so it cannot be called on a batch. "
            "Run a training step with `loss = model.step(inputs, target)`: it runs forward and backward of "
            "every micro-batch through all stages and returns the loss on every rank (then optimizer.step())."
        )

    def step(
        self, *inputs: Any, target: Any = None, loss_fn: Callable[..., Any] | None = None
    ) -> torch.Tensor:
        """One batch through the pipeline (forward + backward); the batch's mean loss, on every rank.

        Every rank may pass the same batch; only the first stage reads `inputs` and only the last
        stage reads `target`. Gradients accumulate in the parameters as loss.backward() would leave
        them (divided by gradient_accumulation_steps), ready for optimizer.step()."""
        schedule = self._ready(inputs, target, loss_fn)
        self._step_losses = []
        kwargs: dict[str, Any] = {"target": target if self.is_last else None, "losses": []}
        self.timeline.begin()
        try:
            schedule.step(*(inputs if self.is_first else ()), **kwargs)
        finally:
            parts = self.timeline.end()
        clock = step_clock.CLOCK
        if clock.enabled:  # where the step went, for result.performance and the RunView
            for part, seconds in parts.items():
                clock.add(part, seconds)
            clock.pipeline = self.timeline.last
        return self._broadcast_loss()

    def eval_step(
        self, *inputs: Any, target: Any = None, loss_fn: Callable[..., Any] | None = None
    ) -> torch.Tensor:
        """One batch through the pipeline, forward only (no gradients): the batch's mean loss on every
        rank, for validation between training steps. gpipe and 1f1b run torch's schedule.eval; the
        multi-stage schedules walk their stages in order (forward_only.py: torch's eval of them runs
        their backward actions and fails)."""
        self._check_step(inputs, target, loss_fn)
        self._step_losses = []
        with torch.no_grad():
            if self.settings.schedule in SINGLE_STAGE:
                schedule = self._schedule or self._build_schedule()
                schedule.eval(
                    *(inputs if self.is_first else ()), target=target if self.is_last else None, losses=[]
                )
            else:
                assert self._loss_fn is not None
                self._step_losses = forward_only_losses(
                    dict(zip(self.stage_ids, self.stage_modules, strict=True)),
                    _stage_to_rank(self.settings.schedule, self.pp_size, self.n_stages),
                    self.pp_rank,
                    inputs if self.is_first else (),
                    target if self.is_last else None,
                    self._loss_fn,
                    self.settings.microbatches(self.pp_size),
                    self.pp_group,
                    self.device,
                )
        return self._broadcast_loss()

    # ------------------------------------------------------------------ internals
    def _ready(self, inputs: tuple[Any, ...], target: Any, loss_fn: Callable[..., Any] | None) -> Any:
        """Check a step's arguments on every rank alike (no rank waits alone); the schedule."""
        self._check_step(inputs, target, loss_fn)
        return self._schedule or self._build_schedule()

    def _check_step(self, inputs: tuple[Any, ...], target: Any, loss_fn: Callable[..., Any] | None) -> None:
        self._adopt_loss_fn(loss_fn)
        first = inputs[0] if inputs else None
        if self.is_first and not isinstance(first, torch.Tensor):
            raise AcceleratorError("model.step(inputs, target) needs the batch's input tensor first.")
        for given in (first, target):  # every rank that has the batch checks it
            if isinstance(given, torch.Tensor):
                check_batch(given.shape[0], self.settings.microbatches(self.pp_size))
        if self.is_last and target is None:
            raise AcceleratorError(
                "model.step(inputs, target=...) needs the target on the last stage (pass the same batch on "
                "every rank)."
            )

    def _adopt_loss_fn(self, loss_fn: Callable[..., Any] | None) -> None:
        if loss_fn is not None and self._loss_fn is not None and loss_fn is not self._loss_fn:
            raise AcceleratorError(
                "model.step(..., loss_fn=) got another loss function than the pipeline's; the schedule is "
                "built with one loss function. Give it once (TorchPipelineParallelConfig(loss_fn=...) or the "
                "first step)."
            )
        if loss_fn is not None:
            self._loss_fn = loss_fn
        if self._loss_fn is None:
            raise AcceleratorError(
                "A pipeline needs its loss function to run backward on the last stage: give it once, as "
                "TorchPipelineParallelConfig(loss_fn=...) or model.step(inputs, target, loss_fn=...)."
            )

    def _scaled_loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The user's loss of one micro-batch, divided so that the summed gradients are those of the
        batch's mean (and of the accumulated batches'); the unscaled value is kept for the report."""
        assert self._loss_fn is not None
        loss = self._loss_fn(output, target)
        self._step_losses.append(loss.detach())
        return loss / (self.settings.microbatches(self.pp_size) * self._grad_divisor())

    def _build_schedule(self) -> Any:
        from torch.distributed.pipelining import PipelineStage
        from torch.distributed.pipelining.schedules import get_schedule_class

        stages = [
            PipelineStage(module, index, self.n_stages, self.device, group=self.pp_group)
            for module, index in zip(self.stage_modules, self.stage_ids, strict=True)
        ]
        self.timeline.attach(stages)
        cls = get_schedule_class(SCHEDULES[self.settings.schedule])
        m = self.settings.microbatches(self.pp_size)
        if self.settings.virtual_stages == 1:
            self._schedule = cls(stages[0], m, loss_fn=self._scaled_loss, scale_grads=False)
        else:
            self._schedule = cls(stages, m, loss_fn=self._scaled_loss, scale_grads=False)
        self.timeline.schedule_built(self._schedule)
        return self._schedule

    def _broadcast_loss(self) -> torch.Tensor:
        if self.is_last:
            # the last m: building the stages may run the loss once more, on a first micro-batch
            m = self.settings.microbatches(self.pp_size)
            loss = torch.stack(self._step_losses[-m:]).float().mean().to(self.device)
        else:
            loss = torch.zeros((), dtype=torch.float32, device=self.device)
        dist.broadcast(loss, group=self.pp_group, group_src=self._last_rank)
        return loss


def _stage_to_rank(schedule: str, pp_size: int, n_stages: int) -> dict[int, int]:
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

    from ....config.pipeline import V_SHAPED

    return generate_stage_to_rank_mapping(pp_size, n_stages, style="v" if schedule in V_SHAPED else "loop")


def stages_of_rank(schedule: str, pp_size: int, n_stages: int, pp_rank: int) -> list[int]:
    """The stage indices a pipeline rank holds (torch's placement for the schedule), in order."""
    mapping = _stage_to_rank(schedule, pp_size, n_stages)
    return [s for s in range(n_stages) if mapping[s] == pp_rank]
