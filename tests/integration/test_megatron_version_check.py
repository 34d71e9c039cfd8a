"""The supported range of megatron-core (patches/megatron_versions) is enforced when the first patched Megatron
module is imported: a release outside it is refused with an error naming the range and the release found, before
anything is patched; one inside it is named in a log line with the folder it comes from. Releases 0.11 and 0.20
are simulated by a copy of the installed Megatron whose package_info says so."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mindio_adaptor.patches import megatron_versions
from mindio_adaptor.upstream import tree as megatron_tree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from megatron_releases import RELEASES, on_release, unpack  # noqa: E402

RESOLVE = ("import json; from mindio_adaptor.patches import before_megatron_import, megatron_versions; "
           "from mindio_adaptor.patches.registry import missing_targets; before_megatron_import(); "
           "print(json.dumps([megatron_versions.installed_version(), missing_targets()]))")
IMPORT_PATCHED = "import mindio_adaptor; mindio_adaptor.patch_all(); import megatron.core.parallel_state"


@pytest.fixture(scope="module")
def megatron_copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron_copy")
    shutil.copytree(megatron_tree.installed_tree().root / "megatron", root / "megatron",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


def import_as(root, minor):
    info = root / megatron_tree.PACKAGE_INFO
    info.write_text(re.sub(r"^MINOR = \d+", f"MINOR = {minor}", info.read_text(), flags=re.M))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", IMPORT_PATCHED], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("minor", [11, 20])
def test_a_release_outside_the_range_is_refused_naming_it(megatron_copy, minor):
    done = import_as(megatron_copy, minor)
    assert done.returncode != 0
    assert re.search(rf"UnsupportedMegatron: mindio_adaptor serves megatron-core 0\.12 to 0\.19; the installed "
                     rf"megatron-core is 0\.{minor}\.\d+", done.stderr), done.stderr[-2000:]


def test_a_release_inside_the_range_is_named_with_its_folder(megatron_copy):
    done = import_as(megatron_copy, 19)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"megatron-core 0.19.2 at {megatron_copy}: the patches serving 0.19 apply" in done.stderr + done.stdout


def test_versions_are_read_and_compared_by_series():
    assert megatron_versions.series_of("0.12.1") == (0, 12)
    assert megatron_versions.series_of("0.19.0rc1") == (0, 19)
    assert megatron_versions.check_supported("0.16.1") == (0, 16)
    with pytest.raises(ValueError, match="not a megatron-core version: 'x.y'"):
        megatron_versions.series_of("x.y")
    with pytest.raises(megatron_versions.UnsupportedMegatron, match="cannot read the installed megatron-core"):
        megatron_versions.check_supported(None)
    assert megatron_versions.in_range((0, 12), None, "0.12") and not megatron_versions.in_range((0, 13), None, "0.12")
    assert megatron_versions.in_range((0, 19), "0.17", None) and not megatron_versions.in_range((0, 16), "0.17", None)
    source = "MAJOR = 0\nMINOR = 12\nPATCH = 1\nPRE_RELEASE = ''\n"
    assert megatron_versions.version_in(source) == (0, 12, 1)
    assert megatron_versions.version_in("MAJOR = 0\n") is None


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_every_patch_target_of_a_release_resolves(release, tmp_path):
    """The fast check per release: each patch serving its series finds its module and target (without
    training; the e2e of tests/e2e/test_megatron_versions.py trains each)."""
    env = {**os.environ, **on_release(unpack(release, tmp_path / "release"))}
    done = subprocess.run([sys.executable, "-c", RESOLVE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    version, missing = json.loads(done.stdout.strip().splitlines()[-1])
    assert version == release and missing == []
