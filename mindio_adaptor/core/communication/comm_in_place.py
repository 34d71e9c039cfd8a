"""Re-initialise every gloo process group of this process in place: a fresh backend, connected anew,
under each live ProcessGroup object, instead of a new default group and new group objects.

When it applies: an online repair with every process alive and the same membership. The stop
(core/communication/comm_abort) shut every gloo connection down, so no old backend is usable, but the group objects
are: their ranks, names and every reference the framework holds to them stay right. Keeping them
saves what a full rebuild (core/communication/comm.CommEpochs) costs after the backends are connected: the
framework's parallel state initialised again and every reference re-pointed by a walk over the heap
(core/communication/group_repoint), and the old groups' destruction (it joins their threads). Measured on the tiny
GPT job (dp4, 2 loaded cores): those cost 0.12-0.2, 0.44-0.81 and 0.2 s of a 1.8-2.5 s repair; the
re-initialisation itself (16 groups of 2 or 4) takes 0.07-0.16 s.

How: torch (2.13) dispatches a collective to the backend registered for the tensor's device type
(ProcessGroup::getBackend(DeviceType)); `_register_backend(device, type, backend)` sets it, but keeps
the backend already registered under `type` if there is one (ProcessGroup::setBackend). So each
re-initialisation registers its fresh backend under a backend type this group has not used yet
(SPARE_TYPES, in order): the device then maps to it. The old backend stays registered under its type
(torch offers no way to drop it): idle threads and closed sockets, a few per group per repair. After
len(SPARE_TYPES) re-initialisations the caller rebuilds fully, which creates fresh group objects.

Order: constructing a gloo backend blocks until every member of its group has constructed it too. Every
rank constructs its groups one by one, sorted by group name (the name torch gave the group, the same on
every member), so two ranks never wait for each other in two different groups. (Constructing them from one
thread each, to overlap the waits, timed out in a trial here, torch 2.13: the constructor seems to keep
the GIL while it waits, so one waiting group stops this rank from joining the others.)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist

# Backend types no gloo job registers itself, used only as distinct keys of a group's backend map.
SPARE_TYPES = ("CUSTOM", "UCC", "MPI", "XCCL")


class InPlaceUnavailable(RuntimeError):
    """This process's groups cannot be re-initialised in place; rebuild them fully."""


@dataclass(frozen=True)
class OwnGroup:
    """One process group this process is a member of, as torch's registry describes it."""
    name: str
    group: object  # dist.ProcessGroup
    ranks: Dict[int, int]  # global rank -> group rank

    def rank_of(self, global_rank: int) -> int:
        return self.ranks[global_rank]


def spare_type(reinits_done: int) -> str:
    """The backend type the next re-initialisation registers under, after `reinits_done` of them on the
    same group objects."""
    if not 0 <= reinits_done < len(SPARE_TYPES):
        raise InPlaceUnavailable(f"{reinits_done} in-place re-initialisations already; a group has no spare "
                                 f"backend type left ({', '.join(SPARE_TYPES)})")
    return SPARE_TYPES[reinits_done]


def in_order(groups: Sequence[OwnGroup]) -> List[OwnGroup]:
    """The order every member constructs its groups in (see the module's note on order)."""
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise InPlaceUnavailable(f"two process groups share a name: {sorted(n for n in names if names.count(n) > 1)}")
    return sorted(groups, key=lambda g: g.name)


def own_groups() -> List[OwnGroup]:
    """Every group of this process, the default one included, from torch's registry."""
    world = dist.distributed_c10d._world
    if not dist.is_initialized():
        raise InPlaceUnavailable("no default process group: nothing to re-initialise")
    return [OwnGroup(world.pg_names[pg], pg, dict(ranks)) for pg, ranks in world.pg_group_ranks.items()
            if isinstance(pg, dist.ProcessGroup)]


@dataclass(frozen=True)
class Plan:
    """What a re-initialisation will do, decided before any member waits for another."""
    kind: str  # the spare backend type
    groups: Tuple[OwnGroup, ...]  # in construction order


def plan(reinits_done: int) -> Plan:
    """Raises InPlaceUnavailable when this process's groups cannot be re-initialised in place."""
    kind = spare_type(reinits_done)
    # A group of one has no connection for the stop to break: its backend is sound and stays.
    groups = tuple(g for g in in_order(own_groups()) if len(g.ranks) > 1)
    for own in groups:
        if dist.get_backend(own.group) != "gloo":
            raise InPlaceUnavailable(f"group {own.name} has backend {dist.get_backend(own.group)}, not gloo")
    return Plan(kind, groups)


def reinitialize(chosen: Plan, store: dist.Store, global_rank: int, timeout: timedelta) -> int:
    """Construct a fresh gloo backend for each planned group on `store` (a prefix no earlier epoch used)
    and make it the one each group's devices dispatch to. Returns how many groups got one. Once this
    has started, the other members are constructing too: a failure is no reason to try something else."""
    kind = getattr(dist.ProcessGroup.BackendType, chosen.kind)
    devices = gloo_devices()  # once: torch's default resolves the host name again for every group
    for own in chosen.groups:
        options = dist.ProcessGroupGloo._Options()
        options._devices, options._timeout = devices, timeout
        options.global_ranks_in_group = sorted(own.ranks, key=own.ranks.get)
        options.group_name = own.name
        backend = dist.ProcessGroupGloo(dist.PrefixStore(f"{own.name}/", store), own.rank_of(global_rank),
                                        len(own.ranks), options)
        for device in own.group._device_types:
            own.group._register_backend(device, kind, backend)
            if own.group._get_backend(device) is not backend:  # torch kept an older backend of that type
                raise RuntimeError(f"group {own.name}: {device} still dispatches to an old backend")
    return len(chosen.groups)


def gloo_devices() -> list:
    """The devices torch gives a gloo group: one per GLOO_SOCKET_IFNAME interface, else the default."""
    names = [n for n in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
    if names:
        return [dist.ProcessGroupGloo.create_device(interface=name) for name in names]
    return [dist.ProcessGroupGloo.create_default_device()]


def dispatches_to(group, device: str = "cpu"):
    """The backend a collective of `group` on `device` runs on (for tests and logs)."""
    return group._get_backend(torch.device(device))
