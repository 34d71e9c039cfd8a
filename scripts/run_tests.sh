#!/usr/bin/env bash
# The project's test command (README): unit, integration and end-to-end tests, or what the arguments name (pytest's:
# a module, -k ...).
#
# Two pytest workers (pytest-xdist) share the modules, a whole module each at a time (module-scoped runs stay in one
# process), in collection order: the long e2e modules first, the short unit ones last to even out the end. An e2e
# job keeps about 1.4 of the 2 cores busy and the integration tests mostly wait on real timers, so two at once end
# sooner than one after the other (README, "Tests"), and every test runs under the other's load, as the tests must
# hold on a busy node. MINDIO_TEST_WORKERS=0 runs them in this process.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- tests
exec python3 -m pytest -q -p no:cacheprovider --durations=15 -n "${MINDIO_TEST_WORKERS:-2}" --dist loadfile \
    --no-loadscope-reorder "$@"
