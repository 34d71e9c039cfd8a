"""Hook points: call sites that a framework's own source marks, reached by wrappers attached at run time.

A source-patched framework decorates a function with `hook("package.module.function")` (or
"package.module.Class.method"). The decorator returns a thin function that, on every call, runs the
wrappers attached to its `HookPoint` around the original, or the original alone when none are
attached. Attaching happens later, at run time (the patch registry does it), so the order of imports
does not matter, and a program that never attaches anything runs the original unchanged.

Wrappers have wrapt's signature `(wrapped, instance, args, kwargs)` and are chained exactly as
stacking `wrapt.FunctionWrapper`s would chain them: the one attached last runs outermost. This is
what makes a hooked call behave like the same call wrapped by monkey-patching.
"""
from __future__ import annotations

import functools
import threading
import types
from typing import Callable, List, Optional, Tuple

import wrapt

MARKER = "__mindio_hook__"  # attribute of a thin function: its HookPoint


class HookPoint:
    """One decorated function: the original and the wrappers attached to it, in attach order."""

    def __init__(self, target: str, original: Callable, is_method: bool):
        self.target = target
        self.original = original
        self.is_method = is_method
        self._attached: List[Tuple[object, Callable]] = []  # (key, wrapper)
        self._chain: Optional[Callable] = None  # None: call the original
        self._lock = threading.Lock()

    def attach(self, key: object, wrapper: Callable) -> None:
        with self._lock:
            self._attached.append((key, wrapper))
            self._rebuild()

    def detach(self, key: object) -> None:
        with self._lock:
            self._attached = [(k, w) for k, w in self._attached if k is not key]
            self._rebuild()

    def wrappers(self) -> List[Callable]:
        """The attached wrappers, innermost first."""
        return [w for _, w in self._attached]

    def _rebuild(self):
        chain = None
        if self._attached:
            chain = self.original
            for _, wrapper in self._attached:
                chain = wrapt.FunctionWrapper(chain, wrapper)
        self._chain = chain  # one assignment: a concurrent call sees the old or the new chain

    def call(self, args: tuple, kwargs: dict):
        chain = self._chain
        if chain is None:
            return self.original(*args, **kwargs)
        if self.is_method:
            # Bind as attribute access on the instance would: the wrappers see `instance`.
            instance, *rest = args
            return chain.__get__(instance, type(instance))(*rest, **kwargs)
        return chain(*args, **kwargs)


def hook(target: str) -> Callable[[Callable], Callable]:
    """Decorator for a module-level function or a method defined directly in a module-level class.
    `target` must be the function's own "module.qualname": a hook names the place it sits."""

    def decorate(function: Callable) -> Callable:
        point = HookPoint(target, function, is_method=_is_method(target, function))

        @functools.wraps(function)
        def hooked(*args, **kwargs):
            return point.call(args, kwargs)

        setattr(hooked, MARKER, point)
        return hooked

    return decorate


def point_of(obj) -> Optional[HookPoint]:
    """The HookPoint of a thin function, else None. Only a plain function counts: a wrapt proxy
    around a thin function forwards attribute reads, yet it is a monkey patch on top, not the hook."""
    if type(obj) is not types.FunctionType:
        return None
    return obj.__dict__.get(MARKER)


def _is_method(target: str, function: Callable) -> bool:
    qualname = getattr(function, "__qualname__", "")
    expected = f"{getattr(function, '__module__', '?')}.{qualname}"
    if target != expected or "<locals>" in qualname or qualname.count(".") > 1:
        raise ValueError(f"hook {target!r} decorates {expected}: a hook must name the module-level "
                         f"function or Class.method it sits on")
    return "." in qualname
