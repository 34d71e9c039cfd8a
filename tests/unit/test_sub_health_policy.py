"""Sub-health signals by policy (core/policy/sub_health, status/sub_health_responder): the action for each
level and subHealthyStrategy, the shipped codes, the signals read from the controller's events, the settings'
errors, and the quiet time after acting on a rank. The controller here records what it is asked (the real one
answers in tests/integration/test_sub_health_actions.py)."""
import pytest

from mindio_adaptor.core.policy import Level, PolicyEngine, load_policy
from mindio_adaptor.core.policy.sub_health import OFFENDER, SDC, SLOW, Action, action_for
from mindio_adaptor.status.sub_health_responder import SubHealthResponder, signal_of
from mindio_adaptor.ttp.fault_policy import FaultPolicy


@pytest.mark.parametrize("level,strategy,action", [
    (Level.NotHandleFault, "hotSwitch", Action.IGNORE),
    (Level.SubHealthFault, "ignore", Action.WARN),
    (Level.SubHealthFault, "hotSwitch", Action.HOT_SWITCH),
    (Level.SubHealthFault, "graceExit", Action.DUMP),
    (Level.SubHealthFault, "forceExit", Action.DUMP),
    (Level.RestartBusiness, "hotSwitch", Action.WARN),
    (Level.PreSeparateNPU, "hotSwitch", Action.WARN),
    (Level.SeparateNPU, "ignore", Action.SEPARATE),
    (Level.RestartNPU, "ignore", Action.SEPARATE),
    (Level.ManuallySeparateNPU, "hotSwitch", Action.SEPARATE),
])
def test_the_action_follows_the_level_and_the_jobs_strategy(level, strategy, action):
    assert action_for(level, strategy) is action


def test_an_unknown_strategy_is_an_error_naming_the_known_ones():
    with pytest.raises(ValueError, match="subHealthyStrategy 'migrate' is not one of ignore, hotSwitch"):
        action_for(Level.SubHealthFault, "migrate")


def test_the_shipped_codes_are_sub_health():
    policy = FaultPolicy(PolicyEngine(load_policy()))
    for code in (SLOW, SDC, OFFENDER):
        assert policy.level(1, code) == Level.SubHealthFault


@pytest.mark.parametrize("kind,detail,signal", [
    ("sub_health", "rank 3 (node vm/node1): MINDIO-SDC", (3, SDC)),
    ("sub_health", "rank 2: VENDOR-7", (2, "VENDOR-7")),
    ("slow_rank", "rank 1: compute 2.1x the median for 3 windows", (1, SLOW)),
    ("fault", "rank 1 node: dead", None),
    ("sub_health", "garbled", None),
])
def test_signals_are_read_from_the_controllers_events(kind, detail, signal):
    assert signal_of(kind, detail) == signal


class AskedController:
    def __init__(self, refuse=""):
        self.events, self.asked, self.refuse = [], [], refuse
        self.ranks = [{"domain": f"n{rank // 2}", "flags": ["registered", "connected"]} for rank in range(4)]

    def controller_ranks(self):
        return self.ranks

    def controller_events(self):
        return list(self.events)

    def hot_switch(self, ranks):
        if self.refuse:
            raise ValueError(self.refuse)
        self.asked.append(("hot switch", ranks))

    def tft_notify_controller_dump(self):
        self.asked.append(("dump",))


def responder(ctl, strategy="hotSwitch", quiet_s=600.0):
    said, now = [], [100.0]
    r = SubHealthResponder(FaultPolicy(PolicyEngine(load_policy())), strategy, ctl, quiet_s, say=said.append,
                           clock=lambda: now[0])
    return r, said, now


def test_a_rank_is_acted_on_once_within_the_quiet_time_then_again():
    ctl = AskedController()
    r, said, now = responder(ctl)
    ctl.events.append((1.0, "slow_rank", "rank 2: slower"))
    r.poll()
    assert ctl.asked == [("hot switch", [2])]
    assert said == ["sub-health policy: rank 2 MINDIO-SLOW -> SubHealthFault -> hot switch: asked for"]
    ctl.events.append((2.0, "slow_rank", "rank 2: slower again"))
    now[0] += 60
    r.poll()
    assert ctl.asked == [("hot switch", [2])]
    assert "not acted on, rank 2 was acted on 60 s ago (MINDIO_SUB_HEALTH_QUIET_S=600)" in said[-1]
    ctl.events.append((3.0, "sub_health", "rank 1 (node n1): MINDIO-SDC"))  # another rank is not held back
    now[0] += 600
    ctl.events.append((4.0, "slow_rank", "rank 2: still slower"))
    r.poll()
    assert ctl.asked == [("hot switch", [2]), ("hot switch", [1]), ("hot switch", [2])]


def test_a_refused_action_is_said_with_the_reason_and_training_goes_on():
    ctl = AskedController(refuse="hot switch refused: process replacement (ARF, --enable-worker-reboot) is off")
    r, said, _ = responder(ctl)
    ctl.events.append((1.0, "sub_health", "rank 1: MINDIO-SDC"))
    r.poll()
    assert said == ["sub-health policy: rank 1 MINDIO-SDC -> SubHealthFault -> hot switch: refused (hot switch "
                    "refused: process replacement (ARF, --enable-worker-reboot) is off); training goes on"]


@pytest.mark.parametrize("strategy,asked", [("ignore", []), ("graceExit", [("dump",)])])
def test_the_other_strategies(strategy, asked):
    ctl = AskedController()
    r, said, _ = responder(ctl, strategy)
    ctl.events.append((1.0, "slow_rank", "rank 3: slower"))
    r.poll()
    assert ctl.asked == asked and len(said) == 1


def test_a_code_listed_to_separate_drains_the_ranks_node(tmp_path):
    codes = tmp_path / "faultCode.json"
    codes.write_text('{"SeparateNPUCodes": ["MINDIO-SDC", "MINDIO-OFFENDER"]}')
    ctl = AskedController()
    said = []
    r = SubHealthResponder(FaultPolicy(PolicyEngine(load_policy(str(codes)))), "ignore", ctl, quiet_s=0,
                           say=said.append)
    ctl.events.append((1.0, "sub_health", "rank 3: MINDIO-SDC"))
    r.poll()
    assert ctl.asked == [("hot switch", [2, 3])]  # rank 3's node n1 holds ranks 2 and 3
    assert said[-1] == "sub-health policy: rank 3 MINDIO-SDC -> SeparateNPU -> separate the node: asked for " \
                       "(ranks [2, 3])"
    r.offender(1)  # the offender watch: rank 1's node n0 became a repeat offender
    assert ctl.asked[-1] == ("hot switch", [0, 1])
    ctl.ranks[0]["domain"] = ""  # a rank that reported no node is switched alone
    ctl.events.append((2.0, "sub_health", "rank 0: MINDIO-SDC"))
    r.poll()
    assert ctl.asked[-1] == ("hot switch", [0])


@pytest.mark.parametrize("env,message", [
    ({"MINDIO_SUB_HEALTHY_STRATEGY": "reboot"}, "subHealthyStrategy 'reboot' is not one of"),
    ({"MINDIO_SUB_HEALTH_QUIET_S": "-1"}, "MINDIO_SUB_HEALTH_QUIET_S='-1': must be within 0..86400 seconds"),
    ({"MINDIO_FAULT_CODE_FILE": "/nonexistent/faultCode.json"}, "/nonexistent/faultCode.json"),
])
def test_bad_settings_are_errors_naming_them(env, message):
    with pytest.raises(Exception, match=message):
        SubHealthResponder.from_env(AskedController(), env)
