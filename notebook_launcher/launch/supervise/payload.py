"""The payload spawned workers start from: the function and its arguments, cloudpickled by value.

Under spawn (the kernel touched CUDA) nothing is inherited, so (fn, args, kwargs) travel as bytes.
What cannot be pickled is named (down to the captured variable); GPU tensors travel on the CPU,
with a note naming where they were (host_pickle.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import ConfigError


def pickle_target(fn: Any, args: tuple, kwargs: dict, say: Callable[[str], None] = print) -> bytes:
    """cloudpickle (fn, args, kwargs) by value; name the object that cannot be pickled.

    GPU tensors among them (captured by fn or passed in) are sent on the CPU and named in a note:
    unpickled as they are, every rank would restore its copy onto cuda:0.
    """
    from ..worker.host_pickle import describe_moved, dumps

    try:
        payload, moved = dumps((fn, args, kwargs))
    except Exception as exc:
        culprit = _find_unpicklable(_target_items(fn, args, kwargs))
        where = f" The problem is {culprit}." if culprit else ""
        raise ConfigError(
            f"The function and its arguments must be picklable to start workers without fork (spawn, or the warm "
            f"pool's forkserver): {exc}.{where} "
            "Create such objects (open files, locks, CUDA tensors, database connections) inside the function."
        ) from exc
    if moved:
        say(
            f"notebook_launch: {describe_moved(moved)} in {_holders_of_gpu_tensors(fn, args, kwargs)} are sent to the "
            "workers on the CPU (restored as they are, every rank's copy would land on cuda:0). In the function, "
            "accelerator.prepare(model) or tensor.to(accelerator.device) puts them on each rank's own device."
        )
    return payload


def _target_items(fn: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    return {
        "fn": fn,
        **{f"args[{i}]": a for i, a in enumerate(args)},
        **{f"kwargs[{k!r}]": v for k, v in kwargs.items()},
    }


def _holders_of_gpu_tensors(fn: Any, args: tuple, kwargs: dict) -> str:
    """'args[0] and the variable 'model' that train uses': where the moved tensors came from."""
    from ..worker.host_pickle import moves_tensors

    items = _target_items(fn, args, kwargs)
    del items["fn"]
    fn_name = getattr(fn, "__name__", "the function")
    items.update(
        {f"the variable {name!r} that {fn_name} uses": v for name, v in captured_variables(fn).items()}
    )
    holders = [name for name, value in items.items() if moves_tensors(value)]
    return " and ".join(holders) or "the function's arguments"


def captured_variables(fn: Any) -> dict[str, Any]:
    """The global and closure variables a function refers to (what cloudpickle sends with it)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    module_globals = getattr(fn, "__globals__", {})
    names = {name: module_globals[name] for name in code.co_names if name in module_globals}
    cells = zip(code.co_freevars, fn.__closure__ or (), strict=False)
    names.update({name: cell.cell_contents for name, cell in cells})
    return names


def _find_unpicklable(items: dict[str, Any]) -> str | None:
    import cloudpickle

    for name, value in items.items():
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            inner = _unpicklable_capture(value) if callable(value) else None
            return inner or f"{name} ({type(value).__name__}: {exc})"
    return None


def _unpicklable_capture(fn: Any) -> str | None:
    """For a function that will not pickle: the global or closure variable it uses that will not."""
    import cloudpickle

    for name, value in captured_variables(fn).items():
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            return f"the variable {name!r} that {getattr(fn, '__name__', 'the function')} uses ({type(value).__name__}: {exc})"
    return None
