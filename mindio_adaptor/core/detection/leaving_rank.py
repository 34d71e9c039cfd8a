"""A live rank that a scale-in drops with its data-parallel slice (elastic training, docs/elastic.md):
its slice lost a rank, so it holds no usable part of a model replica, and the job goes on without it.

It leaves on purpose, not as a fault: its REBUILD_GROUP reply says so to the controller (the protocol's
LEAVES_THE_JOB, on which the controller retires it and leaves it out of the rest of the scale-in), and
its process ends with exit code LEFT_THE_JOB (core/detection/exit_codes), which its launcher neither restarts nor
takes as the end of the job.
"""
from datetime import datetime, timezone


class LeavingTheJob(Exception):
    """Raised on a rank that a scale-in drops; the message is the line its log gives the reason with."""


def leaving_line(rank: int, step: int, plan) -> str:
    """Why rank `rank` leaves after `step` (the scale-in's repair step), with the time (UTC); `plan`: the
    scale-in's core.layout.scale_in_plan.ScaleInPlan."""
    return (f"elastic training: rank {rank} leaves the job after step {step} at "
            f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC')}: its data-parallel slice lost a rank "
            f"(ranks {list(plan.lost)} were lost and not replaced); the job goes on without it, {plan.describe()}")
