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


@functools.lru_cache(maxsize=None)
def _position(function, name: str):
    """Where a call passing `name` positionally puts it, or None where only binding the call can tell (a parameter
    after *args, keyword-only, or behind one)."""
    for position, parameter in enumerate(_signature(function).parameters.values()):
        if parameter.kind not in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            return None
        if parameter.name == name:
            return position
    return None


def argument(wrapped, args, kwargs, name: str):
    """The value `wrapped(*args, **kwargs)` receives as parameter `name` (its default when not passed). Called at
    every step: a call that passed it is read without binding the signature (tens of microseconds)."""
    position = _position(wrapped, name)
    if position is not None and position < len(args):
        return args[position]
    if position is not None and name in kwargs:
        return kwargs[name]
    bound = _signature(wrapped).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments[name]


def with_argument(wrapped, args, kwargs, name: str, value):
    """(args, kwargs) with parameter `name` given `value`, where the call passed it, positionally or not."""
    position = _position(wrapped, name)
    if position is not None and position < len(args):
        return (*args[:position], value, *args[position + 1:]), kwargs
    if position is not None and name in kwargs:
        return args, {**kwargs, name: value}
    bound = _signature(wrapped).bind(*args, **kwargs)
    bound.arguments[name] = value
    return bound.args, bound.kwargs
