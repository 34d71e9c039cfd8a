"""The high-availability flags on Megatron's real parser and validate_args."""
import json
import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).with_name("megatron_flags_probe.py")
DIST = ["--use-distributed-optimizer"]

CASES = [
    ({"flags": DIST + ["--enable-high-availability"]}, {"ok": True, "instances": 2, "ha": True}),
    ({"flags": DIST + ["--enable-high-availability", "--optimizer-replica-num", "4"]},
     {"ok": True, "instances": 4}),
    ({"flags": DIST + ["--enable-high-availability", "--distributed-optimizer-no-replica"]},
     {"ok": True, "instances": 1}),
    ({"flags": DIST}, {"ok": True, "instances": 1, "ha": False}),
    ({"flags": DIST, "env": {"HIGH_AVAILABILITY": "dump,retry"}},
     {"ok": True, "instances": 2, "ha": True, "repair": True}),
    ({"flags": ["--enable-high-availability"]}, "requires --use-distributed-optimizer"),
    ({"flags": DIST + ["--enable-high-availability", "--optimizer-replica-num", "3"]},
     "must divide DP x CP = 4 x 1 = 4"),
    ({"flags": DIST + ["--enable-high-availability"], "world": 1}, "needs a data-parallel size > 1"),
    ({"flags": DIST + ["--enable-high-availability", "--optimizer-replica-num", "0"]},
     "--optimizer-replica-num must be an integer >= 1"),
    ({"flags": DIST + ["--enable-hbmfault-repair"]},
     "--enable-hbmfault-repair requires --enable-high-availability"),
    ({"flags": DIST + ["--enable-high-availability", "--num-distributed-optimizer-instances", "4"]},
     "--num-distributed-optimizer-instances 4 conflicts"),
    ({"flags": DIST, "env": {"HIGH_AVAILABILITY": "dump,bogus"}}, "unknown word(s) ['bogus']"),
    ({"flags": DIST + ["--enable-high-availability", "--enable-elastic-training"]},
     "--enable-elastic-training (scale-in) requires --enable-worker-reboot"),
    ({"flags": DIST + ["--enable-high-availability", "--enable-worker-reboot", "--enable-elastic-training",
                       "--context-parallel-size", "2"], "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}},
     "--enable-elastic-training supports data, tensor, pipeline and expert parallelism alone so far, but this job "
     "has --context-parallel-size 2"),
]


def test_flags_through_megatron_parser():
    done = subprocess.run([sys.executable, str(PROBE), json.dumps([c for c, _ in CASES])],
                          capture_output=True, text=True, timeout=240, env={"RANK": "0", **_env()})
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(CASES), done.stdout + done.stderr
    for (case, expected), result in zip(CASES, results):
        if isinstance(expected, str):
            assert not result["ok"], case
            assert expected in result["error"], (case, result)
        else:
            assert result["ok"], (case, result)
            assert {k: result[k] for k in expected} == expected, case


def test_help_lists_the_flags():
    code = ("import sys, mindio_adaptor; mindio_adaptor.patch_all(); sys.argv=['prog','--help'];"
            "from megatron.training.arguments import parse_args; parse_args()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          env=_env())
    for flag in ("--enable-high-availability", "--enable-hbmfault-repair", "--enable-worker-reboot",
                 "--distributed-optimizer-no-replica", "--enable-elastic-training",
                 "--optimizer-replica-num"):
        assert flag in done.stdout, flag


def _env():
    import os

    return {k: v for k, v in os.environ.items() if k not in ("HIGH_AVAILABILITY", "WORLD_SIZE")}
