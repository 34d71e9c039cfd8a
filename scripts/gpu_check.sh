#!/usr/bin/env bash
# The check on a lent GPU machine (see scripts/gpu_check.py). That machine has torch but no megatron-core and
# no package index: the megatron-core wheel travels in .whl/ (fetched here first, see docs/gpu_check.md).
# The native module is built in place; nothing is installed outside /tmp.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/megatron_core-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 setup.py -q build_ext --inplace >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
export GPU_CHECK_LOGS=${GPU_CHECK_LOGS:-${OUT:-/tmp}}
exec python3 scripts/gpu_check.py
