#!/usr/bin/env bash
# The project's test command (README): unit, integration and end-to-end tests.
#
# With arguments: one pytest run of what they name. Without: the whole suite in two lanes at once, because an
# e2e job keeps about 1.4 of the 2 cores busy while the integration tests mostly wait on real timers (about
# 0.2 of a core): lane A runs the e2e modules that inject faults and time their detection; lane B runs the
# integration and unit tests, then the e2e runs that only compare results (versions, formats, plain runs).
# Each lane has its own pytest session (its own reference runs and temporary directory); the suite fails
# when either lane fails, and lane B's output follows lane A's.
set -euo pipefail
cd "$(dirname "$0")/.."
pytest=(python3 -m pytest -q -p no:cacheprovider --durations=15)
if [ $# -gt 0 ]; then
    exec "${pytest[@]}" "$@"
fi

lane_b_e2e=(test_megatron_versions test_upstream_patched_tree_runs test_forked_workers test_checkpoint_interop
            test_replica_parity test_mixed_precision test_demo test_mindspeed_style_client test_tls_job
            test_sigterm_dump)
lane_a=(tests/e2e)
lane_b=(tests/integration tests/unit)
for module in "${lane_b_e2e[@]}"; do
    [ -f "tests/e2e/$module.py" ] || { echo "run_tests.sh: lane B names tests/e2e/$module.py, which is gone" >&2; exit 2; }
    lane_a+=("--ignore=tests/e2e/$module.py")
    lane_b+=("tests/e2e/$module.py")
done

scratch=$(mktemp -d -t mindio-tests.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
"${pytest[@]}" --basetemp="$scratch/b" "${lane_b[@]}" > "$scratch/lane_b.log" 2>&1 &
lane_b_pid=$!
status_a=0
"${pytest[@]}" --basetemp="$scratch/a" "${lane_a[@]}" || status_a=$?
status_b=0
wait "$lane_b_pid" || status_b=$?
echo "===== lane B: integration, unit, and e2e runs that only compare results (exit $status_b) ====="
cat "$scratch/lane_b.log"
echo "===== lane A exit $status_a, lane B exit $status_b ====="
[ "$status_a" -eq 0 ] && [ "$status_b" -eq 0 ]
