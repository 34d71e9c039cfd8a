"""recovery/resumption: what the training thread of a rank interrupted in step S does after the controller's
decision, from the flow the controller ran and its repair step."""
import pytest

from mindio_adaptor.recovery.resumption import NextMove, Resumption


@pytest.mark.parametrize("flow, repair_step, step, move", [
    ("retry", 4, 5, NextMove.RECOMPUTE),  # the step never completed anywhere
    ("retry", 5, 5, NextMove.REENTER),  # the other replica instance completed it (a fault mid-update)
    ("recover", 4, 5, NextMove.RECOMPUTE),
    ("recover", 5, 5, NextMove.REENTER),
    ("reload", 4, 5, NextMove.RECOMPUTE),  # the checkpoint of the step before: this step again, in place
    ("reload", 3, 5, NextMove.REENTER),  # an older checkpoint: back to it, steps 4 and 5 again
    ("scale_in", 4, 5, NextMove.REENTER),  # a new model and data loader at the smaller size: a new train loop
    ("scale_in", 5, 5, NextMove.REENTER),
    ("scale_out", 6, 7, NextMove.REENTER),  # a new model and data loader at the original size, likewise
])
def test_the_next_move_follows_the_flow_and_the_repair_step(flow, repair_step, step, move):
    assert Resumption("retry", repair_step, flow).next_move(step) == move


@pytest.mark.parametrize("flow, repair_step", [("retry", 3), ("retry", 6), ("reload", 5), ("recover", 7)])
def test_a_repair_step_the_flow_cannot_have_is_an_error(flow, repair_step):
    with pytest.raises(RuntimeError, match=f"the controller's {flow} flow goes on after step {repair_step}, which is "
                                           "neither this step nor the one before it"):
        Resumption("retry", repair_step, flow).next_move(5)
