"""core.steps.hook_points: a hooked function calls the original until wrappers are attached, then runs
them exactly as stacked wrapt wrappers would (the monkey-patched behaviour)."""
import pytest
import wrapt

from mindio_adaptor.core.steps import hook_points
from mindio_adaptor.core.steps.hook_points import hook


def add(a, b=1):
    """Adds."""
    return a + b


class Counter:
    def __init__(self, start):
        self.value = start

    def bump(self, by=1):
        self.value += by
        return self.value


def tracing(name, calls):
    def wrapper(wrapped, instance, args, kwargs):
        calls.append((name, instance, args, kwargs))
        return wrapped(*args, **kwargs) * 10

    return wrapper


def test_without_wrappers_the_original_runs_unchanged():
    hooked = hook(f"{__name__}.add")(add)
    assert hooked(2, b=3) == 5
    assert hooked.__name__ == "add" and hooked.__doc__ == "Adds." and hooked.__wrapped__ is add
    assert hook_points.point_of(hooked).wrappers() == []


def test_attached_wrappers_chain_like_stacked_wrapt_wrappers():
    hooked = hook(f"{__name__}.add")(add)
    point = hook_points.point_of(hooked)
    calls_hook, calls_wrapt = [], []
    point.attach("first", tracing("first", calls_hook))
    point.attach("second", tracing("second", calls_hook))
    stacked = wrapt.FunctionWrapper(wrapt.FunctionWrapper(add, tracing("first", calls_wrapt)),
                                    tracing("second", calls_wrapt))
    assert hooked(2, b=3) == stacked(2, b=3) == 500
    assert calls_hook == calls_wrapt == [("second", None, (2,), {"b": 3}), ("first", None, (2,), {"b": 3})]
    point.detach("second")
    assert hooked(2) == 30
    point.detach("first")
    assert hooked(2) == 3


def test_a_hooked_method_hands_its_instance_to_the_wrappers():
    class Hooked(Counter):
        pass

    Hooked.bump = hook(f"{__name__}.Counter.bump")(Counter.bump)
    calls = []
    hook_points.point_of(Hooked.__dict__["bump"]).attach("key", tracing("w", calls))
    counter = Hooked(5)
    assert counter.bump(2) == 70
    assert Hooked.bump(counter, by=1) == 80  # called through the class: args[0] is the instance
    assert calls == [("w", counter, (2,), {}), ("w", counter, (), {"by": 1})]


def test_a_hook_must_name_the_function_it_decorates():
    with pytest.raises(ValueError, match=r"hook 'elsewhere.add' decorates .*\.add"):
        hook("elsewhere.add")(add)

    def local():
        pass

    with pytest.raises(ValueError, match="must name the module-level function"):
        hook(f"{__name__}.{local.__qualname__}")(local)


def test_a_proxy_around_a_hooked_function_is_not_the_hook():
    hooked = hook(f"{__name__}.add")(add)
    assert hook_points.point_of(hooked) is not None
    assert hook_points.point_of(wrapt.FunctionWrapper(hooked, tracing("w", []))) is None
    assert hook_points.point_of(add) is None
