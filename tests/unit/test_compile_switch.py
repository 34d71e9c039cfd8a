"""torch.compile while TORCH_COMPILE_DISABLE=1: the function back unchanged, no compiler imported."""
import os
import subprocess
import sys

import torch

from mindio_adaptor.core.process import compile_switch

# A fresh interpreter: this test process may have imported torch._dynamo already.
PROBE = """
import sys, torch
from mindio_adaptor.core.process import compile_switch
compile_switch.install()
def fn(x):
    return x + 1
decorated = torch.compile(fullgraph=True)(fn)
print(torch.compile(fn) is fn, decorated is fn, "torch._dynamo" in sys.modules, "torch._inductor" in sys.modules)
"""


def probe(disable: str) -> str:
    env = {**os.environ, "TORCH_COMPILE_DISABLE": disable}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_with_compile_disabled_the_function_comes_back_and_no_compiler_is_imported():
    assert probe("1") == ["True", "True", "False", "False"]


def test_with_compile_enabled_torch_compiles_as_before():
    same, decorated_same, dynamo, _ = probe("0")
    assert (same, decorated_same, dynamo) == ("False", "False", "True")


def test_uninstall_restores_torch_compile():
    original = torch.compile
    compile_switch.install()
    try:
        assert torch.compile is not original and torch.compile.__wrapped__ is original
    finally:
        compile_switch.uninstall()
    assert torch.compile is original
