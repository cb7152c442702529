"""Pipeline-parallel settings (ours: Accelerate 1.x's ParallelismConfig has no pipeline axis): the
schedule, micro-batches, virtual stages per rank and where the model is cut, checked before any
process starts. No torch here; runtime/parallel/pipeline/ builds the stages and the schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import AcceleratorError, ConfigError, bad_value, closest

# our name -> torch.distributed.pipelining's class name (get_schedule_class)
SCHEDULES = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved_1f1b": "Interleaved1F1B",
    "looped_bfs": "LoopedBFS",
    "interleaved_zero_bubble": "InterleavedZeroBubble",
    "zbv_zero_bubble": "ZBVZeroBubble",
    "dualpipev": "DualPipeV",
}
SINGLE_STAGE = ("gpipe", "1f1b")  # one stage per rank
V_SHAPED = ("zbv_zero_bubble", "dualpipev")  # two stages per rank, placed as a V (rank r holds r and 2p-1-r)


@dataclass
class TorchPipelineParallelConfig:
    """How the model is cut into stages and how micro-batches flow through them.

    schedule: one of SCHEDULES. n_microbatches: each batch is cut into this many along dim 0 (None:
    the number of stages). virtual_stages: stages per rank (1 for gpipe/1f1b; >= 2 for the interleaved,
    looped and zero-bubble schedules; 2 for zbv_zero_bubble and dualpipev). split_points: module names where a new
    stage begins (["layers.4"]); None cuts the model's blocks evenly by parameter count.
    loss_fn(output, target) -> loss: given once, here or on the first `model.step(..., loss_fn=)`.
    """

    schedule: str = "1f1b"
    n_microbatches: int | None = None
    virtual_stages: int | None = None
    split_points: list[str] | None = None
    loss_fn: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        self.schedule = str(self.schedule).lower()
        if self.schedule not in SCHEDULES:
            raise bad_value("TorchPipelineParallelConfig schedule", self.schedule, SCHEDULES)
        if self.virtual_stages is None:
            self.virtual_stages = 1 if self.schedule in SINGLE_STAGE else 2
        for name in ("n_microbatches", "virtual_stages"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(
                    f"TorchPipelineParallelConfig {name}={value!r} must be a whole number >= 1."
                )
        if self.schedule in SINGLE_STAGE and self.virtual_stages != 1:
            raise ConfigError(
                f"TorchPipelineParallelConfig schedule={self.schedule!r} runs one stage per rank, but "
                f"virtual_stages={self.virtual_stages}; use virtual_stages=1, or schedule='interleaved_1f1b' "
                "for several stages per rank."
            )
        if self.schedule not in SINGLE_STAGE and self.virtual_stages < 2:
            raise ConfigError(
                f"TorchPipelineParallelConfig schedule={self.schedule!r} runs several stages per rank; "
                f"virtual_stages={self.virtual_stages} must be >= 2 (or use schedule='1f1b')."
            )
        if self.schedule in V_SHAPED and self.virtual_stages != 2:
            raise ConfigError(
                f"TorchPipelineParallelConfig schedule={self.schedule!r} places exactly two stages per rank "
                f"(a V); virtual_stages={self.virtual_stages} must be 2."
            )
        if self.split_points is not None:
            if isinstance(self.split_points, str) or not all(isinstance(p, str) for p in self.split_points):
                raise ConfigError(
                    f"TorchPipelineParallelConfig split_points={self.split_points!r} must be a list of module "
                    "names, e.g. ['layers.4']."
                )
            self.split_points = list(self.split_points)

    def stage_count(self, pp_size: int) -> int:
        """Stages over the whole pipeline: pp_size x virtual_stages."""
        return pp_size * int(self.virtual_stages or 1)

    def microbatches(self, pp_size: int) -> int:
        return int(self.n_microbatches or self.stage_count(pp_size))

    def check_sizes(self, pp_size: int) -> None:
        """What can be checked from the sizes alone (the batch and the model are checked later)."""
        stages = self.stage_count(pp_size)
        if self.split_points is not None and len(self.split_points) != stages - 1:
            raise ConfigError(
                f"TorchPipelineParallelConfig split_points={self.split_points!r} names {len(self.split_points)} "
                f"cut(s), but pp_size={pp_size} x virtual_stages={self.virtual_stages} = {stages} stages need "
                f"{stages - 1}; give {stages - 1} module names, or split_points=None for an even split."
            )
        m = self.microbatches(pp_size)
        if m < pp_size:
            raise ConfigError(
                f"TorchPipelineParallelConfig n_microbatches={m} is fewer than the pp_size={pp_size} stages "
                f"in flight: every stage would wait. Use n_microbatches >= {pp_size}."
            )
        if self.schedule == "dualpipev" and m < stages:
            raise ConfigError(
                f"TorchPipelineParallelConfig schedule='dualpipev' needs at least one micro-batch per stage: "
                f"n_microbatches={m} is fewer than the {stages} stages (pp_size={pp_size} x 2); use "
                f"n_microbatches >= {stages}."
            )
        if self.schedule not in SINGLE_STAGE and m % pp_size:
            raise ConfigError(
                f"TorchPipelineParallelConfig schedule={self.schedule!r} sends micro-batches round by round "
                f"over the ranks: n_microbatches={m} must be a multiple of pp_size={pp_size}."
            )

    def plain_fields(self) -> dict[str, Any]:
        """What travels to the workers (a loss function does not: it belongs in the function)."""
        return {
            "schedule": self.schedule,
            "n_microbatches": self.n_microbatches,
            "virtual_stages": self.virtual_stages,
            "split_points": self.split_points,
        }


def check_batch(batch_size: int, n_microbatches: int) -> None:
    """A batch must cut into equal micro-batches (checked at the first step, when the size is known)."""
    if batch_size % n_microbatches:
        raise ConfigError(
            f"The batch of {batch_size} samples does not divide into n_microbatches={n_microbatches} equal "
            f"micro-batches; use a batch size that is a multiple of {n_microbatches} (drop_last=True for the "
            "last one), or change n_microbatches."
        )


def check_pipeline(
    handler: TorchPipelineParallelConfig | None, size: Callable[[str], int]
) -> TorchPipelineParallelConfig:
    """A ParallelismConfig with pp_size > 1: its handler (a default one if none), checked against the
    other sizes; size(dim) is the config's size of a mesh dim."""
    handler = TorchPipelineParallelConfig() if handler is None else handler
    if not isinstance(handler, TorchPipelineParallelConfig):
        raise ConfigError(f"ParallelismConfig pp_handler={handler!r} must be a TorchPipelineParallelConfig.")
    pp = size("pp")
    handler.check_sizes(pp)
    if size("cp") > 1:
        raise ConfigError(
            f"ParallelismConfig pp_size={pp} with cp_size={size('cp')}: context parallel inside pipeline "
            "stages is not supported; set cp_size=1."
        )
    if size("dp_replicate") > 1 and size("dp_shard") == 1:
        raise ConfigError(
            f"ParallelismConfig pp_size={pp} with dp_replicate_size={size('dp_replicate')} and "
            "dp_shard_size=1: data parallel beside a pipeline is FSDP2 here; set "
            f"dp_shard_size={size('dp_replicate')} and dp_replicate_size=1 (or HSDP: both >= 2)."
        )
    return handler


def pipeline_from_section(section: Mapping[str, Any], prefix: str) -> TorchPipelineParallelConfig:
    """The pipeline settings of a YAML section / the CLI's flags (prefix: "parallelism_config_")."""
    points = section.get(prefix + "pp_split_points")
    if isinstance(points, str):  # the CLI's form: "layers.2,layers.4"
        points = [p.strip() for p in points.split(",") if p.strip()]
    schedule = section.get(prefix + "pp_schedule", "1f1b")
    if schedule not in SCHEDULES:
        raise bad_value(f"parallelism_config.{prefix}pp_schedule", schedule, SCHEDULES)
    micro, virtual = section.get(prefix + "pp_n_microbatches"), section.get(prefix + "pp_virtual_stages")
    return TorchPipelineParallelConfig(
        schedule=schedule,
        n_microbatches=int(micro) if micro is not None else None,
        virtual_stages=int(virtual) if virtual is not None else None,
        split_points=points,
    )


# ------------------------------------------------------------------ the cut rule (runtime and estimate)
def _is_plain_sequential(module: Any) -> bool:
    from torch import nn

    return isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward


def units(model: Any) -> list[tuple[str, Any]]:
    """The blocks a pipeline cuts between, in running order, by qualified name.

    An nn.Sequential: its children. Any other model: the submodule calls of its forward, traced by
    torch.fx with its children (and the entries of a ModuleList/ModuleDict child) opaque, which must
    form a plain chain (chain_of). Either way a block that is itself a plain nn.Sequential is opened
    up (recursively)."""
    if _is_plain_sequential(model):
        top = [(name, child) for name, child in model.named_children()]
    else:
        top = [(name, model.get_submodule(name)) for name in chain_of(model)]
    out: list[tuple[str, Any]] = []

    def walk(name: str, module: Any) -> None:
        if _is_plain_sequential(module) and any(True for _ in module.children()):
            for child_name, child in module.named_children():
                walk(f"{name}.{child_name}", child)
        else:
            out.append((name, module))

    for name, module in top:
        walk(name, module)
    return out


def _cannot_cut(model: Any, why: str) -> AcceleratorError:
    return AcceleratorError(
        f"Pipeline parallelism cannot cut {type(model).__name__}: {why}. A pipeline cuts a model whose "
        "forward is a plain chain of its submodules: each call takes only the previous call's output "
        "(the first takes the forward's one input) and the forward returns the last, e.g. "
        "`h = self.embed(x); for layer in self.layers: h = layer(h); return self.head(self.norm(h))`. "
        "Move any other step (a residual, a scale, a reshape, extra arguments) into a submodule, or write "
        "the model as nn.Sequential(OrderedDict(embed=..., layers=nn.Sequential(*blocks), head=...)) "
        "(docs/model-parallel.md, 'Where the model is cut')."
    )


def _step(node: Any) -> str:
    """A traced step that breaks the chain, in the user's terms."""
    if node.op == "get_attr":
        return f"reads self.{node.target}"
    if node.op in ("call_function", "call_method"):
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", node.target)
        return f"computes `{name}`"
    if node.op == "call_module":
        return f"calls self.{node.target} on other values than the previous call's output alone"
    return "returns other than the last call's output"


def chain_of(model: Any) -> list[str]:
    """The qualified names of the submodules model.forward calls, in order, checked to be a chain
    (torch.fx, the children and the entries of container children opaque)."""
    from torch import fx, nn

    opaque: set[int] = set()
    for child in model.children():
        entries = child.children() if isinstance(child, nn.ModuleList | nn.ModuleDict) else [child]
        opaque |= {id(m) for m in entries}

    class ChainTracer(fx.Tracer):
        def is_leaf_module(self, m: Any, module_qualified_name: str) -> bool:
            return id(m) in opaque or super().is_leaf_module(m, module_qualified_name)

    try:
        graph = ChainTracer().trace(model)
    except Exception as exc:  # noqa: BLE001 - any tracing failure means the same to the user
        raise _cannot_cut(model, f"torch.fx cannot trace its forward ({type(exc).__name__}: {exc})") from None
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    previous: Any = inputs[0] if inputs else None
    if len([n for n in inputs if n.users]) != 1 or not previous.users:
        raise _cannot_cut(model, "its forward must use exactly one input, its first argument")
    calls: list[str] = []
    for node in graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output" and node.args == (previous,):
            break
        if node.op != "call_module" or node.args != (previous,) or node.kwargs:
            raise _cannot_cut(model, f"its forward {_step(node)} after {calls or 'taking its input'}")
        if node.target in calls:
            raise _cannot_cut(model, f"its forward calls {node.target!r} twice")
        calls.append(str(node.target))
        previous = node
    groups = [name.split(".")[0] for name in calls]  # a container's entries must run one after another
    for i, group in enumerate(groups):
        if group in groups[:i] and groups[i - 1] != group:
            raise _cannot_cut(model, f"its forward comes back to {group!r} after leaving it ({calls})")
    return calls


def stage_bounds(
    blocks: Sequence[tuple[str, Any]], n_stages: int, split_points: Sequence[str] | None
) -> list[int]:
    """Index of the first block of each stage (n_stages entries, the first 0): at the split points,
    else where the parameters before a block come nearest to k/n_stages of the whole."""
    names = [n for n, _ in blocks]
    if len(names) < n_stages:
        raise ConfigError(
            f"The model has {len(names)} blocks ({', '.join(names)}) for {n_stages} pipeline stages; each stage "
            "needs at least one block. Use fewer stages (pp_size x virtual_stages) or a model with more blocks."
        )
    if split_points is not None:
        starts = [0]
        for point in split_points:
            if point not in names:
                raise ConfigError(
                    f"TorchPipelineParallelConfig split_points names {point!r}, which is no block of the "
                    f"model (blocks: {', '.join(names)}).{closest(point, names)}"
                )
            starts.append(names.index(point))
        if any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
            raise ConfigError(
                f"TorchPipelineParallelConfig split_points={list(split_points)!r} must name blocks in running "
                f"order, none first (blocks: {', '.join(names)})."
            )
        return starts
    counts = [sum(p.numel() for p in module.parameters()) for _, module in blocks]
    total = sum(counts) or 1
    before = [sum(counts[:i]) for i in range(len(counts) + 1)]  # parameters before block i
    starts = [0]
    for k in range(1, n_stages):
        lo, hi = starts[-1] + 1, len(names) - (n_stages - k)  # leave a block for each later stage
        target = k * total / n_stages
        starts.append(min(range(lo, hi + 1), key=lambda i: (abs(before[i] - target), i)))
    return starts
