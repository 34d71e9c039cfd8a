#include "controller/flows.h"

#include <stdexcept>

#include "common/text.h"

namespace mindio {
namespace {

bool reloads(const FaultContext& ctx) { return ctx.reload_step >= 0; }

// Online repair: STOP and CLEAN the live ranks, REPAIR the faulty ones from their replica peers (or
// LOAD_CKPT everywhere when no live replica holds some shard), ROLLBACK and NORMAL.
const Flow kRetry{
    Strategy::Retry,
    "retry",
    /*replaces=*/false,
    /*may_reload=*/true,
    /*relayouts=*/false,
    /*hands_over=*/false,
    {
        {FlowOp::Begin},
        {FlowOp::Act, ActionKind::Stop, "stop failed or a new fault arrived during repair"},
        {FlowOp::ReportStopComplete},
        {FlowOp::Act, ActionKind::Clean, "clean failed or a new fault arrived during repair"},
        {FlowOp::EnterRepair},
        {FlowOp::Act, ActionKind::Repair, "repair failed or a new fault arrived during repair", true},
        {FlowOp::Act, ActionKind::Rollback, "rollback failed or a new fault arrived during repair"},
        {FlowOp::Act, ActionKind::Normal, "resuming failed"},
        {FlowOp::Finish},
    },
    Strategy::Dump,
    [](const FaultContext& ctx) {
        return reloads(ctx) ? "online reload of the checkpoint of step " + std::to_string(ctx.reload_step) +
                                  " (retry, load_ckpt)"
                            : std::string("online repair (retry)");
    },
    [](const FaultContext&) { return std::string("environment clean"); },
    [](const FaultContext& ctx) {
        return std::string(reloads(ctx) ? "online reload" : "online repair") + " finished at step " +
               std::to_string(ctx.repair_step);
    },
};

// Process replacement, as the reference: STOP and CLEAN the survivors, take the dead ranks offline,
// wait for a restarted process of each to register and report ready, then REBUILD_GROUP on all,
// REPAIR the replacements from live replica peers, ROLLBACK and NORMAL on all.
const Flow kRecover{
    Strategy::Recover,
    "recover",
    /*replaces=*/true,
    /*may_reload=*/false,
    /*relayouts=*/false,
    /*hands_over=*/false,
    {
        {FlowOp::Begin},
        {FlowOp::Act, ActionKind::Stop, "stop failed or a new fault arrived during process replacement"},
        {FlowOp::ReportStopComplete},
        {FlowOp::Act, ActionKind::Clean, "clean failed or a new fault arrived during process replacement"},
        {FlowOp::TakeOffline},
        {FlowOp::AwaitReplacements},
        {FlowOp::EnterRepair},
        {FlowOp::Act, ActionKind::RebuildGroup, "rebuilding the communication groups failed or a new fault arrived"},
        {FlowOp::Act, ActionKind::Repair, "repairing the replacements failed or a new fault arrived"},
        {FlowOp::Act, ActionKind::Rollback, "rollback failed or a new fault arrived during process replacement"},
        {FlowOp::Act, ActionKind::Normal, "resuming failed"},
        {FlowOp::Finish},
    },
    Strategy::Dump,
    [](const FaultContext& ctx) { return "process replacement (recover) of ranks " + list_text(ctx.replace); },
    [](const FaultContext& ctx) { return "replacements of ranks " + list_text(ctx.replace) + " ready"; },
    [](const FaultContext& ctx) {
        return "ranks " + list_text(ctx.replace) + " replaced, training resumes at step " +
               std::to_string(ctx.repair_step);
    },
};

// The dump: STOP the live ranks (unless a flow that fell back stopped them; a rank that fails it is
// left to the savers' choice), SAVE_CKPT on one complete replica, RENAME on one saver, EXIT everyone.
// Not interruptible: a second fault can only make it exit, which it does anyway.
const Flow kDump{
    Strategy::Dump,
    "dump",
    /*replaces=*/false,
    /*may_reload=*/false,
    /*relayouts=*/false,
    /*hands_over=*/false,
    {
        {FlowOp::BeginDump},
        // op, action, failure, skip_if_none, targets, interruptible, unless_stopped, names_failed
        {FlowOp::Act, ActionKind::Stop, "", false, FlowTargets::Flow, false, true},
        {FlowOp::PickSavers},
        {FlowOp::Act, ActionKind::SaveCkpt, "saving the checkpoint failed on ranks", false, FlowTargets::Savers, false,
         false, true},
        {FlowOp::Act, ActionKind::Rename, "renaming the checkpoint failed", false, FlowTargets::OneSaver, false},
        {FlowOp::FinishByExit},
    },
    Strategy::Exit,
    nullptr,
    nullptr,
    [](const FaultContext& ctx) { return "dump of step " + std::to_string(ctx.repair_step) + " complete"; },
};

// Scale-in (elastic training), when a process replacement got no replacement in time: instead of the
// dump-and-exit, the survivors drop the data-parallel slices that lost a rank (REBUILD_GROUP, the lost
// ranks as its fault ranks), take the repair step's state at the smaller data-parallel size (REPAIR),
// ROLLBACK and go on. Where the state comes from is the ranks' choice (--elastic-scale-in-from): resharded
// among the survivors in memory, SAVE_CKPT and RENAME then being no-ops on the savers, or from the dump
// of the repair step that the savers write and publish first, which is then the resume point should a
// later action fail. Either way a failure ends like the dump's (exit).
const Flow kScaleIn{
    Strategy::ScaleIn,
    "scale_in",
    /*replaces=*/false,
    /*may_reload=*/true,
    /*relayouts=*/true,
    /*hands_over=*/false,
    {
        {FlowOp::BeginScaleIn},
        {FlowOp::Act, ActionKind::Stop, "", false, FlowTargets::Flow, false, true},
        {FlowOp::PickSavers},
        {FlowOp::Act, ActionKind::SaveCkpt, "saving the checkpoint to scale in from failed on ranks", false,
         FlowTargets::Savers, false, false, true},
        {FlowOp::Act, ActionKind::Rename, "renaming the checkpoint to scale in from failed", false,
         FlowTargets::OneSaver, false},
        {FlowOp::EnterRepair},
        {FlowOp::RetireLost},
        {FlowOp::Act, ActionKind::RebuildGroup, "rebuilding the groups among the survivors failed", false,
         FlowTargets::Flow, false},
        {FlowOp::Act, ActionKind::Repair, "taking the repair step's state at the smaller data-parallel size failed", false,
         FlowTargets::Flow, false},
        {FlowOp::Act, ActionKind::Rollback, "rollback after the scale-in failed", false, FlowTargets::Flow, false},
        {FlowOp::Act, ActionKind::Normal, "resuming after the scale-in failed", false, FlowTargets::Flow, false},
        {FlowOp::Finish},
    },
    Strategy::Exit,
    nullptr,
    [](const FaultContext& ctx) {
        return "scale-in: ranks " + list_text(ctx.replace) + " were not replaced; the survivors go on without " +
               "their data-parallel slices from step " + std::to_string(ctx.repair_step);
    },
    [](const FaultContext& ctx) {
        return "scaled in without ranks " + list_text(ctx.replace) + ", training resumes at step " +
               std::to_string(ctx.repair_step);
    },
};

// Scale-out (elastic training), when the ranks a scale-in retired have returned (restarted processes
// registered for them and reported ready; partial: some of them, controller/scale_out.h, then the rest
// are named absent at REBUILD_GROUP and a returned rank may leave again there) while the job trains at the
// smaller size: STOP the survivors
// (after a PRELOCK: the repair step is the one they all completed), CLEAN (their groups among
// themselves again, which the stop broke), SAVE_CKPT on every survivor (the checkpoint of the repair
// step at the smaller size, published by one of them), then with the returned ranks REBUILD_GROUP at
// the original size, REPAIR (LOAD_CKPT of that step at the original data-parallel size), ROLLBACK, and
// go on. The returned ranks sit out until the repair (ctx.replace, as a process replacement's). The
// state goes through a checkpoint, not a replica peer: the survivors' optimizer shards are laid out for
// the smaller size, and Megatron's distributed checkpoint is what reshards them.
const Flow kScaleOut{
    Strategy::ScaleOut,
    "scale_out",
    /*replaces=*/true,
    /*may_reload=*/true,
    /*relayouts=*/true,
    /*hands_over=*/false,
    {
        {FlowOp::Begin},
        {FlowOp::Act, ActionKind::Stop, "stopping the survivors for the scale-out failed or a new fault arrived"},
        {FlowOp::Act, ActionKind::Clean, "rebuilding the survivors' groups for the scale-out failed or a new fault "
                                         "arrived"},
        {FlowOp::Act, ActionKind::SaveCkpt, "saving the checkpoint to scale out from failed on ranks", false,
         FlowTargets::Flow, true, false, true},
        {FlowOp::EnterRepair},
        {FlowOp::Act, ActionKind::RebuildGroup, "rebuilding the groups at the original size failed or a new fault "
                                                "arrived"},
        {FlowOp::Act, ActionKind::Repair, "loading the checkpoint at the original data-parallel size failed"},
        {FlowOp::Act, ActionKind::Rollback, "rollback after the scale-out failed"},
        {FlowOp::Act, ActionKind::Normal, "resuming after the scale-out failed"},
        {FlowOp::ReturnRetired},
        {FlowOp::Finish},
    },
    Strategy::Exit,
    [](const FaultContext& ctx) {
        if (!ctx.absent.empty()) {
            return "partial scale-out: ranks " + list_text(ctx.replace) + " returned, ranks " + list_text(ctx.absent) +
                   " stay out; the job grows without their data-parallel slices from step " +
                   std::to_string(ctx.repair_step);
        }
        return "scale-out: ranks " + list_text(ctx.replace) + " returned; the job grows back to its original size "
               "from the checkpoint of step " + std::to_string(ctx.repair_step);
    },
    [](const FaultContext& ctx) { return "returned ranks " + list_text(ctx.replace) + " join"; },
    [](const FaultContext& ctx) {
        return "scaled out with ranks " + list_text(ctx.replace) + ", training resumes at step " +
               std::to_string(ctx.repair_step);
    },
};

// Hot switch: a live rank (or a node's) handed over to a new process at a step boundary, every rank holding
// after the same step (a pause). STOP and CLEAN on every rank, the leaving ones with them (their training
// thread must park before it can leave), EXIT (strategy hot_switch) to the leaving ones, whose launchers
// start their new processes; then as a process replacement: REBUILD_GROUP with the new processes, REPAIR
// them from their live replica peers, ROLLBACK (to the step every rank completed: no step is lost) and
// NORMAL. A failed step falls back as a process replacement's does.
const Flow kHotSwitch{
    Strategy::HotSwitch,
    "hot_switch",
    /*replaces=*/true,
    /*may_reload=*/false,
    /*relayouts=*/false,
    /*hands_over=*/true,
    {
        {FlowOp::Begin},
        {FlowOp::Act, ActionKind::Stop, "stop failed or a fault arrived during the hot switch"},
        {FlowOp::Act, ActionKind::Clean, "clean failed or a fault arrived during the hot switch"},
        {FlowOp::HandOver},
        {FlowOp::AwaitReplacements},
        {FlowOp::EnterRepair},
        {FlowOp::Act, ActionKind::RebuildGroup, "rebuilding the groups with the new processes failed or a fault "
                                                "arrived during the hot switch"},
        {FlowOp::Act, ActionKind::Repair, "repairing the new processes failed or a fault arrived during the hot "
                                          "switch"},
        {FlowOp::Act, ActionKind::Rollback, "rollback failed or a fault arrived during the hot switch"},
        {FlowOp::Act, ActionKind::Normal, "resuming failed"},
        {FlowOp::Finish},
    },
    Strategy::Dump,
    [](const FaultContext& ctx) {
        return "hot switch of ranks " + list_text(ctx.replace) + " after step " + std::to_string(ctx.repair_step);
    },
    [](const FaultContext& ctx) { return "new processes of ranks " + list_text(ctx.replace) + " ready"; },
    [](const FaultContext& ctx) {
        return "ranks " + list_text(ctx.replace) + " switched to new processes, training resumes at step " +
               std::to_string(ctx.repair_step);
    },
};

}  // namespace

const char* flow_op_name(FlowOp op) {
    switch (op) {
        case FlowOp::Begin: return "begin";
        case FlowOp::Act: return "act";
        case FlowOp::ReportStopComplete: return "report_stop_complete";
        case FlowOp::TakeOffline: return "take_offline";
        case FlowOp::AwaitReplacements: return "await_replacements";
        case FlowOp::EnterRepair: return "enter_repair";
        case FlowOp::Finish: return "finish";
        case FlowOp::BeginDump: return "begin_dump";
        case FlowOp::PickSavers: return "pick_savers";
        case FlowOp::FinishByExit: return "finish_by_exit";
        case FlowOp::BeginScaleIn: return "begin_scale_in";
        case FlowOp::RetireLost: return "retire_lost";
        case FlowOp::ReturnRetired: return "return_retired";
        case FlowOp::HandOver: return "hand_over";
    }
    return "?";
}

const char* flow_targets_name(FlowTargets t) {
    switch (t) {
        case FlowTargets::Flow: return "flow";
        case FlowTargets::Savers: return "savers";
        case FlowTargets::OneSaver: return "one_saver";
    }
    return "?";
}

const Flow& flow_for(Strategy s) {
    if (s == Strategy::Retry) return kRetry;
    if (s == Strategy::Recover) return kRecover;
    if (s == Strategy::Dump) return kDump;
    if (s == Strategy::ScaleIn) return kScaleIn;
    if (s == Strategy::ScaleOut) return kScaleOut;
    if (s == Strategy::HotSwitch) return kHotSwitch;
    throw std::invalid_argument(std::string("no recovery flow for strategy ") + strategy_name(s));
}

ActionMsg base_action(ActionKind kind, const FaultContext& ctx, Strategy s) {
    ActionMsg m;
    m.kind = kind;
    m.strategy = s;
    m.step = ctx.repair_step;
    m.is_uce = ctx.is_uce;
    for (const auto& [rank, f] : ctx.faults) m.error_ranks.push_back(rank);
    for (int r : ctx.repair_set) {
        if (!ctx.faults.count(r)) m.error_ranks.push_back(r);
    }
    return m;
}

}  // namespace mindio
