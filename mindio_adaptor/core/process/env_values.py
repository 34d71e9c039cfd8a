"""Settings read from the environment, checked, with errors that name the variable and the range."""
from __future__ import annotations

import os
from typing import Mapping, Optional


def seconds_from_env(name: str, default: Optional[float], low: float, high: float,
                     environ: Mapping[str, str] = os.environ) -> Optional[float]:
    """A duration from the environment, checked; `default` when unset."""
    value = environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected seconds, e.g. 30") from None
    if not low <= seconds <= high:
        raise ValueError(f"{name}={value!r}: must be within {low:g}..{high:g} seconds")
    return seconds
