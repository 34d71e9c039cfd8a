"""Re-point every reference to a process group that was replaced.

After a membership change the old groups are dead, and a framework keeps references to them in many
places it built at start: module globals, models, buffers, optimizers, config objects. Rather than
knowing each of those places (and missing the next one a new framework version adds), the caller
gives a mapping old -> new and every container the garbage collector knows to refer to an old group
(an object's attributes, a dict, a list; instance dicts the collector no longer tracks are reached
through their owners) gets the new one. Tuples and other immutable holders cannot be
changed: they are counted and named, so the caller can refuse to continue rather than train on a dead
group.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


class KeepsOldGroups(list):
    """A list that holds replaced groups on purpose (core/communication/group_graveyard): repoint leaves it alone."""


@dataclass
class RepointReport:
    replaced: int = 0
    immutable: List[str] = field(default_factory=list)  # holders that could not change
    in_frames: List[str] = field(default_factory=list)  # immutable holders only function locals refer to


def repoint(mapping: Dict[object, object], owner_modules: Optional[Tuple[str, ...]] = None) -> RepointReport:
    """Replace, in every mutable container, each value that IS an old group (identity) by its new one.
    `owner_modules` (module name prefixes) limits the search for untracked instance dicts to
    objects of those modules' classes: that search reads every object's __dict__, which costs time
    and makes CPython build the dicts it keeps inline."""
    report = RepointReport()
    by_id = {id(old): new for old, new in mapping.items() if old is not new}
    olds = [old for old in mapping if id(old) in by_id]
    for holder in gc.get_referrers(*olds):  # one pass over the heap for all of them
        if holder is mapping or holder is olds or isinstance(holder, KeepsOldGroups):
            continue
        report.replaced += _replace_in(holder, by_id, report)
    report.replaced += _replace_in_untracked_dicts(by_id, owner_modules)
    return report


def _replace_in_untracked_dicts(by_id: Dict[int, object], owner_modules: Optional[Tuple[str, ...]]) -> int:
    """CPython stops tracking a dict whose values cannot form cycles, e.g. an instance __dict__ that
    holds only groups (pybind objects, not collected): the collector then reports no referrer for
    them. Those dicts are reached through their owners."""
    count = 0
    # The heap of a Megatron job holds about half a million objects of a few thousand types: deciding
    # once per type whether it is an owner's halves this pass (bench: 0.84 s -> 0.41 s on a loaded
    # machine), the largest part of a rebuild.
    is_owner: Dict[type, bool] = {}
    for owner in gc.get_objects():
        if owner_modules is not None:
            kind = type(owner)
            known = is_owner.get(kind)
            if known is None:
                known = is_owner[kind] = _of_modules(kind, owner_modules)
            if not known:
                continue
        try:
            attributes = object.__getattribute__(owner, "__dict__")
        except (AttributeError, TypeError):
            continue
        if isinstance(attributes, dict) and not gc.is_tracked(attributes):
            for key, value in list(attributes.items()):
                if id(value) in by_id:
                    attributes[key] = by_id[id(value)]
                    count += 1
    return count


def _of_modules(kind: type, owner_modules: Tuple[str, ...]) -> bool:
    module = kind.__dict__.get("__module__")  # a class's own, not a descriptor of `type`
    return isinstance(module, str) and module.startswith(owner_modules)


def _replace_in(holder, by_id: Dict[int, object], report: RepointReport) -> int:
    count = 0
    if isinstance(holder, dict):
        for key, value in list(holder.items()):
            if id(value) in by_id:
                holder[key] = by_id[id(value)]
                count += 1
    elif isinstance(holder, list):
        for i, value in enumerate(holder):
            if id(value) in by_id:
                holder[i] = by_id[id(value)]
                count += 1
    elif isinstance(holder, (tuple, frozenset, set)):
        owners = sorted({type(o).__name__ for o in gc.get_referrers(holder)} - {"list"})
        where = f"{type(holder).__name__} of {len(holder)} held by {','.join(owners) or '?'}"
        # A function's locals: usually the frames of the interrupted call, kept by its traceback,
        # which never run again; reported apart, as they cannot be told from a live caller's.
        (report.in_frames if owners == ["frame"] else report.immutable).append(where)
    else:
        count += _replace_attributes(holder, by_id)
    # frames, cells and the like: a local variable of a running function cannot be rebound here
    return count


def _replace_attributes(holder, by_id: Dict[int, object]) -> int:
    """An object that refers to a group directly: since Python 3.11 an instance's attributes may live
    inline in the object rather than in a __dict__ the collector reports, and __slots__ never have one."""
    count = 0
    names = list(getattr(holder, "__dict__", {}))
    for klass in type(holder).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    for name in names:
        try:
            value = getattr(holder, name)
        except AttributeError:
            continue
        if id(value) in by_id:
            try:
                setattr(holder, name, by_id[id(value)])
                count += 1
            except (AttributeError, TypeError):
                pass
    return count
