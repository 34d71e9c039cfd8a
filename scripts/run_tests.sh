#!/usr/bin/env bash
# The project's test command (README): unit, integration and end-to-end tests.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 -m pytest -q -p no:cacheprovider --durations=15 tests "$@"
