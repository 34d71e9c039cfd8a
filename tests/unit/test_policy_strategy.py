"""Level -> controller strategy, SubHealthFault's job strategy, and fallbacks when a strategy is off."""
import pytest

from mindio_adaptor.core.policy.levels import Level
from mindio_adaptor.core.policy.strategy import Strategy, preferred_strategy, strategy_for

S = Strategy

LEVEL_CASES = [
    (Level.NotHandleFault, S.NONE),
    (Level.SubHealthFault, S.NONE),
    (Level.RestartRequest, S.RETRY),
    (Level.RestartBusiness, S.RETRY),
    (Level.FreeRestartNPU, S.RECOVER),
    (Level.RestartNPU, S.RECOVER),
    (Level.PreSeparateNPU, S.NONE),
    (Level.SeparateNPU, S.RECOVER),
    (Level.ManuallySeparateNPU, S.RECOVER),
]


@pytest.mark.parametrize("level, strategy", LEVEL_CASES)
def test_every_level_has_a_strategy(level, strategy):
    assert strategy_for(level) is strategy


@pytest.mark.parametrize("sub_healthy, strategy", [
    ("ignore", S.NONE), ("graceExit", S.DUMP), ("forceExit", S.EXIT),
    ("hotSwitch", S.NONE)])  # a hot switch is for sub-health signals (core/policy/sub_health), not faults
def test_sub_health_follows_the_job_strategy(sub_healthy, strategy):
    assert strategy_for(Level.SubHealthFault, sub_healthy) is strategy


def test_unknown_sub_healthy_strategy_is_refused():
    with pytest.raises(ValueError, match="ignore, hotSwitch, graceExit, forceExit"):
        preferred_strategy(Level.SubHealthFault, "gracefulExit")


def test_sub_healthy_strategy_does_not_change_other_levels():
    assert strategy_for(Level.SeparateNPU, "forceExit") is S.RECOVER


FALLBACK_CASES = [
    # level, enabled strategies, chosen
    (Level.RestartBusiness, ["retry", "recover", "dump"], S.RETRY),
    (Level.RestartBusiness, ["recover", "dump"], S.RECOVER),
    (Level.RestartBusiness, ["dump"], S.DUMP),
    (Level.RestartBusiness, [], S.EXIT),
    (Level.SeparateNPU, ["retry", "dump"], S.DUMP),
    (Level.SeparateNPU, ["retry"], S.EXIT),
    (Level.SeparateNPU, ["recover", "elastic-training"], S.RECOVER),
    (Level.NotHandleFault, [], S.NONE),
    (Level.PreSeparateNPU, [], S.NONE),
    (Level.SubHealthFault, [" retry "], S.NONE),
]


@pytest.mark.parametrize("level, enabled, strategy", FALLBACK_CASES)
def test_disabled_strategy_falls_back_to_a_more_drastic_one(level, enabled, strategy):
    assert strategy_for(level, enabled=enabled) is strategy


def test_grace_exit_without_dump_exits():
    assert strategy_for(Level.SubHealthFault, "graceExit", enabled=["retry"]) is S.EXIT
