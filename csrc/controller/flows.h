// The recovery flows as data: online repair (Strategy::Retry) and process replacement
// (Strategy::Recover) share one skeleton (stop, clean, [take offline, await the replacements, rebuild
// the groups,] repair, rollback, normal), and the dump (Strategy::Dump) is stop, pick the savers,
// save, rename, exit. The scale-in (Strategy::ScaleIn, elastic training) is the dump without the exit:
// the survivors rebuild their groups among themselves, reload the dump at the smaller data-parallel
// size, roll back and go on. The scale-out (Strategy::ScaleOut) is its way back when the retired ranks
// return: the survivors save the step they stopped at, and every rank, the returned ones with them,
// rebuilds the groups at the original size and reloads it. Each is a list of steps run by one loop
// (FlowRunner::run, flow_runner.h). A step that fails hands its reason to the flow's fallback: the dump for a
// recovery, the exit for the dump and the scale-out.
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
    BeginDump,           // Dump, for the reason the flow was started with; the targets are the live ranks
    PickSavers,          // the savers from the replica layout; fails when no complete replica is left
    FinishByExit,        // EXIT everyone: the dump is complete (result 0)
    BeginScaleIn,        // the dump of the repair step is the state the survivors reload; the targets are the
                         // live ranks, the repair is LOAD_CKPT of the repair step
    RetireLost,          // the ranks that were not replaced leave the job for good (no replacement is awaited)
    ReturnRetired,       // the retired ranks that returned (ctx.replace) are members of the job again
    HandOver,            // the leaving ranks (ctx.replace, stopped with the others) are told to exit: their
                         // launchers start their new processes; they leave the targets and are offline
};
const char* flow_op_name(FlowOp op);

// Whom an Act step's action goes to.
enum class FlowTargets {
    Flow,      // the flow's targets (Begin, EnterRepair)
    Savers,    // the ranks PickSavers chose
    OneSaver,  // the first of them
};
const char* flow_targets_name(FlowTargets t);

struct FlowStep {
    FlowOp op;
    ActionKind action = ActionKind::Stop;  // for Act
    const char* failure = "";              // for Act: why the flow falls back; empty: a failure is ignored
    bool skip_if_none = false;             // for Act: a REPAIR nobody needs is not sent
    FlowTargets targets = FlowTargets::Flow;
    bool interruptible = true;     // a second fault ends the action
    bool unless_stopped = false;   // skipped when the ranks were stopped already (a flow that fell back)
    bool names_failed = false;     // the failure reason is followed by the ranks that failed
};

struct Flow {
    Strategy strategy;
    const char* result;  // the strategy reported to the cluster manager
    bool replaces;       // ctx.replace sits out until its replacements join, and is repaired then
    bool may_reload;     // with ctx.reload_step set, the REPAIR is LOAD_CKPT of that step
    // Its REBUILD_GROUP changes the data-parallel size (a scale-in or scale-out): the controller forgets
    // the replica layout before sending it, and every rank reports its layout at the new size (in the
    // numbering of the job's start) before it answers.
    bool relayouts;
    // ctx.replace are live processes that hand their ranks over (a hot switch): they stop and clean with the
    // others, then leave (HandOver); `replaces` brings their new processes in.
    bool hands_over;
    std::vector<FlowStep> steps;
    Strategy fallback;  // Dump or Exit: what a failed step leads to
    // The reasons given for the state transitions (BeginDump takes the reason the flow was started with).
    std::string (*begin_why)(const FaultContext& ctx);
    std::string (*repair_why)(const FaultContext& ctx);
    std::string (*finish_why)(const FaultContext& ctx);
};

// The flow of Strategy::Retry, Recover, Dump, ScaleIn, ScaleOut or HotSwitch.
const Flow& flow_for(Strategy s);

// An action's fields common to every target: its kind and strategy, the step, and the error ranks (the
// faulty ones, then the rest of the repair set).
ActionMsg base_action(ActionKind kind, const FaultContext& ctx, Strategy s);

}  // namespace mindio
