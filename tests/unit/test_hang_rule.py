"""The hang rule's limits (core/detection/hang_rule): from the job's own measurements, with a floor, warm-up
excluded, the collective timeout before anything is measured, fixed limits from the environment."""
import pytest

from mindio_adaptor.core.detection.hang_rule import SectionLimits, SectionRule, default_rules, limits_from_env


def test_initial_limit_until_enough_is_measured_and_the_warmup_is_skipped():
    limits = SectionLimits({"step": SectionRule(floor_s=12, factor=10, initial_s=600, warmup=1, min_samples=2)})
    assert limits.limit("step") == (600, "initial (0 of 2 durations measured)")
    limits.record("step", 30.0)  # the first step: compilation, allocation; not measured
    limits.record("step", 0.4)
    assert limits.limit("step")[0] == 600
    limits.record("step", 0.5)
    assert limits.limit("step") == (12, "floor (median 0.450 s)")


def test_a_slow_job_gets_factor_times_its_median():
    limits = SectionLimits({"step": SectionRule(floor_s=12, factor=10, initial_s=600, warmup=0)})
    for seconds in (30.0, 31.0, 29.0, 300.0):
        limits.record("step", seconds)
    assert limits.limit("step") == pytest.approx((305.0, "10 x median 30.500 s"))


def test_the_window_forgets_old_durations():
    limits = SectionLimits({"save": SectionRule(floor_s=1, factor=2, initial_s=60, warmup=0, window=3)})
    for seconds in (100.0, 100.0, 100.0, 5.0, 5.0, 5.0):
        limits.record("save", seconds)
    assert limits.limit("save")[0] == 10.0


def test_fixed_limits_from_the_environment_replace_the_rule():
    limits = limits_from_env(600, {"MINDIO_STEP_TIMEOUT_S": "8", "MINDIO_SAVE_TIMEOUT_S": "900"})
    assert limits.limit("step") == (8.0, "fixed by MINDIO_STEP_TIMEOUT_S")
    assert limits.limit("save") == (900.0, "fixed by MINDIO_SAVE_TIMEOUT_S")
    assert limits.limit("eval")[0] == 600


def test_defaults_and_the_step_floor_from_the_environment():
    limits = limits_from_env(600, {"MINDIO_HANG_FLOOR_S": "20"})
    assert limits.rules == default_rules(600, 20.0)
    assert limits.rules["step"].floor_s == 20 and limits.rules["save"].floor_s == 60
    # A collective timeout shorter than a floor does not undercut the floor.
    assert default_rules(5)["save"].initial_s == 60


@pytest.mark.parametrize("env,problem", [
    ({"MINDIO_STEP_TIMEOUT_S": "soon"}, "MINDIO_STEP_TIMEOUT_S='soon': expected seconds"),
    ({"MINDIO_SAVE_TIMEOUT_S": "0"}, "MINDIO_SAVE_TIMEOUT_S='0': must be within 1..604800 seconds"),
    ({"MINDIO_HANG_FLOOR_S": "-3"}, "MINDIO_HANG_FLOOR_S='-3': must be within"),
])
def test_bad_environment_values_are_refused_by_name(env, problem):
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(".", r"\.")):
        limits_from_env(600, env)


def test_unknown_sections_and_bad_rules_are_refused():
    limits = SectionLimits(default_rules(600))
    with pytest.raises(ValueError, match="unknown section 'warmup'"):
        limits.limit("warmup")
    with pytest.raises(ValueError, match="floor and initial limit must be positive"):
        SectionRule(floor_s=0, factor=2, initial_s=1)
    with pytest.raises(ValueError, match="fixed limits for unknown sections"):
        SectionLimits(default_rules(600), {"nap": 3})
