"""One visible composition per Megatron function that several patches wrap (patches/compositions): the table
names exactly the patches' wrappers, and the registry applies them in its order whatever PATCH_MODULES' order."""
import importlib
from collections import defaultdict

import pytest

import mindio_adaptor.patches as patches_package
from mindio_adaptor.patches import compositions
from mindio_adaptor.patches.compositions import COMPOSED, wrapper_name
from mindio_adaptor.patches.registry import all_patches


def wrappers_by_target():
    found = defaultdict(set)
    for patch in all_patches():
        found[patch.target].add(wrapper_name(patch.wrapper))
    return found


def test_every_function_wrapped_several_times_has_one_composition_naming_its_wrappers():
    found = wrappers_by_target()
    several = {target for target, names in found.items() if len(names) > 1}
    assert several == set(COMPOSED)
    for target, order in COMPOSED.items():
        assert len(set(order)) == len(order), target
        assert set(order) == found[target], target


def applied_order(target):
    return [wrapper_name(p.wrapper) for p in all_patches() if p.target == target]


@pytest.mark.parametrize("target", sorted(COMPOSED))
def test_the_registry_applies_the_innermost_first_whatever_the_modules_order(target, monkeypatch):
    expected = list(reversed(COMPOSED[target]))
    assert applied_order(target) == expected
    monkeypatch.setattr(patches_package, "PATCH_MODULES", list(reversed(patches_package.PATCH_MODULES)))
    assert applied_order(target) == expected


def test_the_other_rows_keep_their_places():
    rows = all_patches()
    single = [p for p in rows if p.target not in COMPOSED]
    assert single, "every row is composed?"
    by_module = [p for name in patches_package.PATCH_MODULES for p in _rows_of(name) if p.target not in COMPOSED]
    assert [id(p) for p in single] == [id(p) for p in by_module]


def _rows_of(name):
    return importlib.import_module(f"mindio_adaptor.patches.{name}").PATCHES


def test_a_wrapper_missing_from_its_composition_is_named():
    with pytest.raises(ValueError, match="test_compositions.test_the_other_rows_keep_their_places wraps "
                                         "megatron.training.training.train_step, whose composition"):
        compositions.innermost_first("megatron.training.training.train_step", test_the_other_rows_keep_their_places)
