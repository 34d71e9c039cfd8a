#!/usr/bin/env bash
# Installs what mindio_adaptor needs on a CPU machine (Python 3.11): torch (CPU), megatron-core 0.19.2
# (which ships megatron.training), and this package with its native module. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# Pinned torch: an unpinned request would download a multi-GB CUDA build.
if ! $PY -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
    $PY -m pip install -q torch==2.13.0
fi
$PY -m pip install -q "setuptools>=64" wheel "pybind11>=2.12" wrapt numpy packaging einops psutil \
    typing_extensions pytest pytest-xdist prometheus_client matplotlib py-spy six regex pyyaml pydantic isort
# isort: tests/unit/test_imports_sorted keeps the package's imports in order.
# py-spy: a test run that hangs puts every process's stacks in its error (tiny_job), so a CI log shows where.
# six, regex: megatron.training of 0.12 and 0.16 imports them at start (its tokenizers); pyyaml: 0.12 to 0.18
# (its YAML arguments); pydantic: 0.16's training. The version tests run those releases (docs/megatron_versions.md).
# megatron-core >= 0.17 declares Python >= 3.12 but runs on 3.11; its sdist builds helpers_cpp.
if ! $PY -c "import importlib.metadata as m, sys; sys.exit(m.version('megatron-core') != '0.19.2')" 2>/dev/null; then
    $PY -m pip install -q --ignore-requires-python --no-deps --no-build-isolation megatron-core==0.19.2
fi
# The other releases that ship megatron.training as wheels, for the version tests (tests/e2e/test_megatron_versions.py
# unpacks each into a folder of its own on PYTHONPATH; the releases before them are Megatron-LM trees in
# ../shared/megatron-lm). Downloaded once, not installed.
WHEELS=${MINDIO_MEGATRON_WHEELS:-$HOME/.cache/mindio-adaptor/megatron-wheels}
for version in 0.17.0 0.18.0; do
    if ! ls "$WHEELS"/megatron_core-$version-*.whl >/dev/null 2>&1; then
        $PY -m pip download -q --ignore-requires-python --no-deps -d "$WHEELS" megatron-core==$version
    fi
done
$PY -m pip install -q --no-build-isolation --no-deps -e .
# These machines set PYTHONDONTWRITEBYTECODE: without the compiled modules here, every process of every test run
# compiles the package's modules again when it imports them (about half a CPU-second each).
$PY -m compileall -q mindio_adaptor
$PY -c "import importlib.metadata as m, mindio_adaptor._native, mindio_adaptor._fork_guard; print('mindio_adaptor', m.version('mindio_adaptor'), 'with megatron-core', m.version('megatron-core'), 'and torch', m.version('torch'))"
