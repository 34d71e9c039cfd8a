"""The controller's flow table (controller/flows.cpp, through _native.flow_table) and the ranks' (recovery/flows
FLOWS) describe the same recoveries: for every strategy the actions the controller sends, in its order, are the
actions the ranks' flow runs stages for. NORMAL ends every recovery on the processor's side and has no stages;
EXIT may come in any flow (a fallback, the dump's end), so every flow of the ranks has it."""
import pytest

from mindio_adaptor import _native as nat
from mindio_adaptor.recovery.flows import ACTED_ON, FLOWS

STRATEGIES = ["retry", "recover", "dump", "scale_in", "scale_out", "hot_switch"]


def controller_actions(strategy):
    return [step["action"] for step in nat.flow_table(strategy)["steps"] if step["op"] == "act"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_controllers_actions_are_the_ranks_flow_in_order(strategy):
    sent = [action for action in controller_actions(strategy) if action != "normal"]
    assert sent == [action for action in FLOWS[strategy] if action != "exit"]
    assert "exit" in FLOWS[strategy]
    assert set(sent) <= set(ACTED_ON)


def test_a_reload_is_the_retry_flow_with_another_repair():
    # The controller has one flow for both: its REPAIR is LOAD_CKPT when a checkpoint is reloaded (may_reload).
    assert nat.flow_table("retry")["may_reload"]
    assert list(FLOWS["reload"]) == list(FLOWS["retry"])


def test_the_ranks_have_no_flow_the_controller_lacks():
    # "exit" (a decided end) and "none" (an action before any decision) are the controller's exit_all, not a flow.
    assert set(FLOWS) == set(STRATEGIES) | {"reload", "exit", "none"}
