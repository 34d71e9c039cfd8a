"""The controller's goodput ledger (csrc/controller/goodput.h) as people read it: one line for the log at the
job's end and for `mindio-adaptor status`. Every second of the wall time is in exactly one use."""
from typing import Dict

USES = ("productive", "start_up", "saving", "stalled", "paused", "recovering", "recomputed")


def goodput_line(goodput: Dict) -> str:
    """'goodput 0.91 of 120.40 s: productive 109.60 s, start-up 8.10 s, ...; recovery #1: ABNORMAL 0.30 s, ...'"""
    wall, uses = goodput["wall_s"], goodput["uses"]
    ratio = uses["productive"] / wall if wall > 0 else 0.0
    parts = [f"{use.replace('_', '-')} {uses[use]:.2f} s" for use in USES if uses[use] >= 0.005 or use == "productive"]
    line = f"goodput {ratio:.2f} of {wall:.2f} s: {', '.join(parts)}"
    for r in goodput["recoveries"]:
        phases = ", ".join(f"{state} {s:.2f} s" for state, s in sorted(r["phases"].items()))
        line += f"; recovery #{r['number']}: {phases}, recomputed {r['recomputed_s']:.2f} s"
    return line
