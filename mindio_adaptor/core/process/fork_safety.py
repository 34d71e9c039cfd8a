"""A fork made while a native thread enters Python must not leave the child stuck (CPython gh-112275, up to
3.11.7; csrc/fork_guard/fork_guard.c says how). Every process that has such threads guards its forks: a
training process (torch's gloo threads; patch_all), a processor and a controller (their threads call back)."""
from mindio_adaptor import _fork_guard


def guard_forks() -> bool:
    """Hold CPython's thread-state list lock across this process's later forks where this Python needs it
    (idempotent). -> whether the guard is in place (False: this Python has no such defect)."""
    return _fork_guard.install()
