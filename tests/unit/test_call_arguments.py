"""A wrapped function's arguments by name: read and replaced without binding the signature where the call passed
them, and exactly as binding would where it did not."""
import inspect

import pytest

from mindio_adaptor.megatron.call_arguments import argument, has_parameter, passes, with_argument


def train_step(forward_step_func, data_iterator, model, optimizer, scheduler, config, forward_backward_func=None):
    return locals()


def keyword_only(a, *rest, name=3, **more):
    return locals()


CALLS = [(train_step, (1, 2, 3, 4, 5, 6, 7), {}), (train_step, (1, 2, 3, 4, 5, 6), {"forward_backward_func": 7}),
         (train_step, (1, 2, 3, 4, 5, 6), {}), (train_step, (1,), {"data_iterator": 2, "model": 3, "optimizer": 4,
                                                                    "scheduler": 5, "config": 6}),
         (keyword_only, (1, 2), {"name": 9}), (keyword_only, (1,), {})]


@pytest.mark.parametrize("function,args,kwargs", CALLS)
def test_reading_and_replacing_agree_with_binding(function, args, kwargs):
    name = "forward_backward_func" if function is train_step else "name"
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    assert argument(function, args, kwargs, name) == bound.arguments[name]
    new_args, new_kwargs = with_argument(function, args, kwargs, name, "replaced")
    assert function(*new_args, **new_kwargs)[name] == "replaced"
    assert {k: v for k, v in function(*new_args, **new_kwargs).items() if k != name} == \
           {k: v for k, v in function(*args, **kwargs).items() if k != name}
    assert has_parameter(function, name)
    assert passes(function, args, kwargs, name) == (name in inspect.signature(function).bind_partial(*args, **kwargs)
                                                    .arguments)
