"""A wrapped Megatron function's arguments by name, for wrappers of functions whose parameters moved between
megatron-core versions (training_log's iteration is its 4th parameter in 0.19 and its 5th in 0.12)."""
import functools
import inspect


@functools.lru_cache(maxsize=None)
def _signature(function) -> inspect.Signature:
    return inspect.signature(function)


def has_parameter(wrapped, name: str) -> bool:
    return name in _signature(wrapped).parameters


def passes(wrapped, args, kwargs, name: str) -> bool:
    """Whether the call `wrapped(*args, **kwargs)` gives parameter `name` a value (positionally or not)."""
    return name in _signature(wrapped).bind_partial(*args, **kwargs).arguments


def argument(wrapped, args, kwargs, name: str):
    """The value `wrapped(*args, **kwargs)` receives as parameter `name` (its default when not passed)."""
    bound = _signature(wrapped).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments[name]


def with_argument(wrapped, args, kwargs, name: str, value):
    """(args, kwargs) with parameter `name` given `value`, where the call passed it, positionally or not."""
    bound = _signature(wrapped).bind(*args, **kwargs)
    bound.arguments[name] = value
    return bound.args, bound.kwargs
