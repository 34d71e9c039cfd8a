"""A launcher started by Slurm's srun, one per node (`srun --ntasks-per-node=1 mindio-adaptor launch ...`),
finds its place in the job from Slurm's variables: the node count, its node rank, the first node of
the step (node 0, which hosts the stores) and the job id. Flags and PET_* variables still win.

The first node is read from the compressed node list (`node[01-04,07],gpu5`) here rather than by
running `scontrol show hostnames`: only its first host is needed, and the launcher must not depend on
Slurm's tools being on the PATH of the step.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional


class SlurmError(ValueError):
    """Slurm's variables say something the launcher cannot run with; the message names the variable."""


@dataclass(frozen=True)
class SlurmPlace:
    nnodes: int
    node_rank: int
    first_node: str
    job_id: str


def slurm_place(environ: Mapping[str, str]) -> Optional[SlurmPlace]:
    """This launcher's place from srun's variables, or None outside a Slurm step."""
    if "SLURM_JOB_ID" not in environ or "SLURM_NODEID" not in environ:
        return None
    nnodes = _int(environ, "SLURM_NNODES" if "SLURM_NNODES" in environ else "SLURM_JOB_NUM_NODES")
    node_rank = _int(environ, "SLURM_NODEID")
    tasks = environ.get("SLURM_NTASKS")
    if tasks is not None and tasks.strip() != str(nnodes):
        raise SlurmError(f"SLURM_NTASKS={tasks} on SLURM_NNODES={nnodes} nodes: start one launcher per node "
                         f"(srun --ntasks-per-node=1 mindio-adaptor launch ...); it starts the node's workers itself")
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise SlurmError("SLURM_JOB_NODELIST is not set: cannot tell which node is node 0 (pass --master-addr)")
    return SlurmPlace(nnodes, node_rank, first_host(nodelist), environ["SLURM_JOB_ID"])


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: `node[01-04,07],gpu5` -> node01, `r[1-2]-n[3-4]` -> r1-n3."""
    text = nodelist.strip()
    first_item = re.match(r"(?:[^,\[\]]|\[[^\]]*\])*", text).group(0)  # up to a comma outside []
    host = re.sub(r"\[([^\]]*)\]", lambda m: _first_of_range_list(m.group(1), nodelist), first_item)
    if not host or text[len(first_item):][:1] not in ("", ","):
        raise SlurmError(f"node list {nodelist!r} is malformed: expected e.g. node[01-04],gpu5")
    return host


def _first_of_range_list(ranges: str, nodelist: str) -> str:
    first = ranges.split(",")[0].split("-")[0].strip()
    if not first.isdigit():
        raise SlurmError(f"node list {nodelist!r} is malformed: [{ranges}] is not a list of number ranges")
    return first  # kept as written: its zero padding is part of the host name


def _int(environ: Mapping[str, str], name: str) -> int:
    value = environ.get(name)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SlurmError(f"{name}={value!r}: expected a number (srun sets it)") from None
