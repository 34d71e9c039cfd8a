"""core/communication/comm_in_place: the order every member constructs its groups in, the spare backend types, and a
real two-process gloo world whose connections a stop shut down, working again on the same group objects."""
import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from recovery_fakes import run_ranks
from mindio_adaptor.core.communication import comm_abort, comm_in_place
from mindio_adaptor.core.communication.comm_in_place import InPlaceUnavailable, OwnGroup, in_order, spare_type


def test_groups_are_constructed_in_name_order_on_every_member():
    groups = [OwnGroup("3", None, {0: 0, 1: 1}), OwnGroup("0", None, {0: 0}), OwnGroup("12", None, {1: 0})]
    assert [g.name for g in in_order(groups)] == ["0", "12", "3"]


def test_two_groups_of_one_name_cannot_be_told_apart():
    with pytest.raises(InPlaceUnavailable, match=r"share a name: \['5', '5'\]"):
        in_order([OwnGroup("5", None, {0: 0}), OwnGroup("5", None, {1: 0})])


def test_each_reinitialisation_takes_the_next_spare_type_until_none_is_left():
    assert [spare_type(n) for n in range(len(comm_in_place.SPARE_TYPES))] == list(comm_in_place.SPARE_TYPES)
    with pytest.raises(InPlaceUnavailable, match="4 in-place re-initialisations already"):
        spare_type(4)
    for name in comm_in_place.SPARE_TYPES:  # each is a backend type torch knows
        getattr(dist.ProcessGroup.BackendType, name)


def stop_and_reinitialize(rank):
    pair = dist.new_group([0, 1])
    solo = [dist.new_group([r]) for r in (0, 1)][rank]  # new_group is collective: both make both
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=30))
    before = comm_in_place.dispatches_to(pair), comm_in_place.dispatches_to(solo)
    sums = []
    for done in range(2):
        comm_abort.break_collectives("gloo", {int(os.environ["MASTER_PORT"])})  # what a stop does
        chosen = comm_in_place.plan(done)
        count = comm_in_place.reinitialize(chosen, dist.PrefixStore(f"test{done}", store), rank,
                                           timedelta(seconds=20))
        total = torch.ones(1) * (rank + 1)
        dist.all_reduce(total)
        paired = torch.ones(1)
        dist.all_reduce(paired, group=pair)
        sums.append((count, float(total), float(paired)))
    return {"sums": sums, "kind": chosen.kind, "pair new": comm_in_place.dispatches_to(pair) is not before[0],
            "solo kept": comm_in_place.dispatches_to(solo) is before[1]}


def test_a_stopped_world_works_again_on_the_same_group_objects():
    results = run_ranks(2, stop_and_reinitialize)
    for rank in (0, 1):
        status, out = results[rank]
        assert status == "ok", out
        assert out["sums"] == [(2, 3.0, 2.0), (2, 3.0, 2.0)]  # the world and the pair; not the groups of one
        assert out["kind"] == "UCC" and out["pair new"] and out["solo kept"]
