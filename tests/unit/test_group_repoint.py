"""Re-pointing references from replaced objects: every kind of holder the collector can reach."""
from dataclasses import dataclass

from mindio_adaptor.core.communication.group_repoint import KeepsOldGroups, repoint


class Group:  # stands for a ProcessGroup: identity is what counts
    pass


class Slotted:
    __slots__ = ("group",)

    def __init__(self, group):
        self.group = group


@dataclass
class Collection:
    dp: object
    tp: object


class Plain:
    def __init__(self, group):
        self.group = group


def test_every_mutable_holder_gets_the_new_group():
    old_dp, old_tp, new_dp, new_tp = Group(), Group(), Group(), Group()
    in_list, in_dict = [old_dp, 1], {"g": old_tp, "x": 2}
    slotted, plain, collection = Slotted(old_dp), Plain(old_tp), Collection(old_dp, old_tp)
    nested = {"outer": [{"inner": old_dp}]}
    report = repoint({old_dp: new_dp, old_tp: new_tp})
    assert in_list[0] is new_dp and in_dict["g"] is new_tp
    assert slotted.group is new_dp and plain.group is new_tp
    assert collection.dp is new_dp and collection.tp is new_tp  # a dict of uncollected values only
    assert nested["outer"][0]["inner"] is new_dp
    assert report.replaced >= 7 and not report.immutable


def test_a_tuple_holding_an_old_group_is_reported():
    old, new = Group(), Group()
    holder = {"pair": (old, 1)}
    report = repoint({old: new})
    assert holder["pair"][0] is old
    assert report.immutable and report.immutable[0].startswith("tuple of 2")


def test_a_list_that_keeps_old_groups_on_purpose_is_left_alone():
    old, new = Group(), Group()
    kept, plain = KeepsOldGroups([old]), [old]
    report = repoint({old: new})
    assert kept[0] is old and plain[0] is new and not report.immutable
