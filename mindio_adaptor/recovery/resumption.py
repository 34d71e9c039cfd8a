"""The controller's decision as the rank acts on it: training goes on after the repair step, in the flow
the controller ran (recovery/flows). From the flow and the repair step follows what the training
thread does next; the rank's own step only says where it stands, not what was decided."""
from dataclasses import dataclass
from enum import Enum


class NextMove(Enum):
    RECOMPUTE = "recompute the interrupted step in place"
    REENTER = "enter Megatron's train loop again after the repair step"


@dataclass(frozen=True)
class Resumption:
    strategy: str  # as the controller named it: retry, recover
    repair_step: int  # training goes on after this step
    flow: str  # the flow this rank ran: retry, reload, recover (recovery/flows.FLOWS)

    def next_move(self, step: int) -> NextMove:
        """For a rank whose train_step of `step` was interrupted."""
        if self.flow in ("scale_in", "scale_out"):  # a new model, optimizer and data loader: a new train loop
            return NextMove.REENTER
        if self.repair_step == step - 1:  # the state is the step before's (repaired or reloaded): this step again
            return NextMove.RECOMPUTE
        if self.flow == "reload" and self.repair_step < step:  # an older checkpoint: the steps since it again
            return NextMove.REENTER
        if self.flow != "reload" and self.repair_step == step:  # the other replica instance completed it
            return NextMove.REENTER
        raise RuntimeError(f"step {step}: the controller's {self.flow} flow goes on after step {self.repair_step}, "
                           f"which is neither this step nor the one before it")
