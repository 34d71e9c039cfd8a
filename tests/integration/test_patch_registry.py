"""patch_all()/unpatch_all() against the installed megatron, each case in a fresh process."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mindio_adaptor.patches import registry
from mindio_adaptor.patches.registry import Patch, PatchTargetMissing

PROBE = Path(__file__).with_name("patch_registry_probe.py")


@pytest.mark.parametrize("order", ["before", "after"])
def test_patch_all_is_idempotent_and_unpatch_all_restores(order):
    done = subprocess.run([sys.executable, str(PROBE), order], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["applied"]) == result["total"], result  # every patch found its target
    assert result["wrapped_once"] and result["alias_patched"] and result["mode_active"]
    assert result["restored"] and result["originals"] and result["cuda_restored"]


def test_missing_target_fails_loudly_naming_it():
    import types

    module = types.ModuleType("fake_megatron_module")
    patch = Patch("fake_megatron_module", "no_such_function", lambda w, i, a, k: w(*a, **k))
    with pytest.raises(PatchTargetMissing, match=r"fake_megatron_module\.no_such_function: not found in the "
                                                 r"installed Megatron \(megatron-core 0\.19\.\d.*\); it serves "
                                                 r"megatron-core 0\.12 to 0\.19"):
        registry._apply(patch, module)
