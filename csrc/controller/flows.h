// The recovery flows as data: online repair (Strategy::Retry) and process replacement
// (Strategy::Recover) share one skeleton (stop, clean, [take offline, await the replacements, rebuild
// the groups,] repair, rollback, normal), so each is a list of steps run by one loop
// (Controller::run_flow). A step that fails falls back to the dump with the step's reason.
#pragma once
#include <string>
#include <vector>

#include "controller/planner.h"
#include "protocol/messages.h"

namespace mindio {

enum class FlowOp {
    Begin,               // EnvClear; the targets are the live ranks, less those being replaced
    Act,                 // run `action` on the targets
    ReportStopComplete,  // tell the cluster manager
    TakeOffline,         // the ranks being replaced are cut off
    AwaitReplacements,   // their restarted processes register and report ready
    EnterRepair,         // Repair; the replacements join the targets
    Finish,              // Normal; the result goes to the cluster manager
};

struct FlowStep {
    FlowOp op;
    ActionKind action = ActionKind::Stop;  // for Act
    const char* failure = "";              // for Act: why the flow dumps when the action fails
    bool skip_if_none = false;             // for Act: a REPAIR nobody needs is not sent
};

struct Flow {
    Strategy strategy;
    const char* result;  // the strategy reported to the cluster manager
    bool replaces;       // ctx.replace sits out until its replacements join, and is repaired then
    bool may_reload;     // with ctx.reload_step set, the REPAIR is LOAD_CKPT of that step
    std::vector<FlowStep> steps;
    // The reasons given for the state transitions.
    std::string (*begin_why)(const FaultContext& ctx);
    std::string (*repair_why)(const FaultContext& ctx);
    std::string (*finish_why)(const FaultContext& ctx);
};

// The flow of Strategy::Retry or Strategy::Recover.
const Flow& flow_for(Strategy s);

}  // namespace mindio
