"""A live rank that a scale-in drops with its data-parallel slice (elastic training, docs/elastic.md):
its slice lost a rank, so it holds no usable part of a model replica, and the job goes on without it. A
returned rank leaves a partial scale-out the same way where its slice has a rank that stays out.

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


def leaving_again_line(rank: int, absent, plan, refused: str = "") -> str:
    """Why returned rank `rank` leaves a partial scale-out again: its data-parallel slice has `absent` ranks, or
    (`refused`) nobody can join at the size it would make; `plan`: the job's plan from its start afterwards."""
    why = (f"nobody joins ({refused})" if refused else
           f"its data-parallel slice has a rank that stays out (absent ranks {sorted(absent)})")
    return (f"elastic training: returned rank {rank} leaves the job again at "
            f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC')}, in a partial scale-out: {why}; the job "
            f"goes on without it, {plan.describe()}")
