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
    [](const FaultContext& ctx) { return "process replacement (recover) of ranks " + list_text(ctx.replace); },
    [](const FaultContext& ctx) { return "replacements of ranks " + list_text(ctx.replace) + " ready"; },
    [](const FaultContext& ctx) {
        return "ranks " + list_text(ctx.replace) + " replaced, training resumes at step " +
               std::to_string(ctx.repair_step);
    },
};

}  // namespace

const Flow& flow_for(Strategy s) {
    if (s == Strategy::Retry) return kRetry;
    if (s == Strategy::Recover) return kRecover;
    throw std::invalid_argument(std::string("no recovery flow for strategy ") + strategy_name(s));
}

}  // namespace mindio
