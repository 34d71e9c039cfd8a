#include "controller/flow_runner.h"

#include "common/text.h"

namespace mindio {

// Runs `flow`'s steps in order; the first that fails hands its reason to the flow's fallback.
void FlowRunner::run(const Flow& flow, FaultContext& ctx, const std::string& reason) {
    FlowRun state;
    state.reason = reason;
    for (const FlowStep& step : flow.steps) {
        if (!host_.lease_holds()) return;
        std::string why = run_step(flow, step, ctx, state);
        if (why.empty()) continue;
        if (!host_.lease_holds()) return;  // the fallback acts too
        if (scales_in_instead(flow, step)) return run(flow_for(Strategy::ScaleIn), ctx, why);
        if (flow.fallback == Strategy::Dump) return run(flow_for(Strategy::Dump), ctx, why);
        return host_.exit_all(why, 499);
    }
}

// With elastic training on, a replacement that never came (the wait for it failed) makes the job go on
// without the lost ranks' data-parallel slices instead of dumping and ending. Any other failure of a
// recovery still falls back to the dump.
bool FlowRunner::scales_in_instead(const Flow& flow, const FlowStep& failed) const {
    return elastic_ && flow.replaces && failed.op == FlowOp::AwaitReplacements;
}

// One step of a flow; returns why the flow cannot go on, empty when it can.
std::string FlowRunner::run_step(const Flow& flow, const FlowStep& step, FaultContext& ctx, FlowRun& run) {
    switch (step.op) {
        case FlowOp::Begin: host_.begin(flow, ctx, run); return "";
        case FlowOp::Act: return act(flow, step, ctx, run);
        case FlowOp::ReportStopComplete: host_.report_cluster(ClusterReport{"report_stop_complete"}); return "";
        case FlowOp::TakeOffline: host_.take_offline(ctx.replace); return "";
        case FlowOp::AwaitReplacements: return host_.await_replacements(ctx.replace);
        case FlowOp::EnterRepair:
            host_.enter_repair(flow.repair_why(ctx));
            if (flow.replaces) run.targets.insert(ctx.replace.begin(), ctx.replace.end());
            return "";
        case FlowOp::Finish: host_.finish(flow, ctx); return "";
        case FlowOp::BeginDump: host_.begin_dump(run); return "";
        case FlowOp::PickSavers: return host_.pick_savers(ctx, run);
        case FlowOp::FinishByExit: host_.exit_all(flow.finish_why(ctx), 0); return "";
        case FlowOp::BeginScaleIn: host_.begin_scale_in(ctx, run); return "";
        case FlowOp::RetireLost: host_.retire(ctx.replace, Leaving::Lost); return "";
        case FlowOp::HandOver: return host_.hand_over(ctx, run);
        case FlowOp::ReturnRetired: host_.return_retired(ctx.replace); return "";
    }
    return "";
}

std::set<int> FlowRunner::step_targets(const FlowStep& step, const FlowRun& run) {
    switch (step.targets) {
        case FlowTargets::Flow: return run.targets;
        case FlowTargets::Savers: return run.savers;
        case FlowTargets::OneSaver: return {*run.savers.begin()};
    }
    return {};
}

// Runs one action of a flow on its targets; why the flow cannot go on, empty when it can.
std::string FlowRunner::act(const Flow& flow, const FlowStep& step, FaultContext& ctx, FlowRun& run) {
    const ActionKind kind = step.action;
    if (step.unless_stopped && ctx.stopped) return "";
    ActionOutcome out;
    if (kind == ActionKind::Repair) {
        // LOAD_CKPT when no live replica holds some shard: every rank loads the last periodic checkpoint again
        // (a scale-in: the dump it just wrote, at the smaller size); ROLLBACK then takes every rank to that step.
        ActionGroups groups;
        if (flow.may_reload && ctx.reload_step >= 0) {
            ActionMsg msg = base_action(ActionKind::Repair, ctx, flow.strategy);
            msg.repair.push_back(reload_info(run.targets));
            groups.push_back({run.targets, msg});
        } else {
            groups = host_.repair_messages(ctx, flow.strategy, run.clean_results);
        }
        if (groups.empty() && step.skip_if_none) return "";
        out = host_.act(ActionKind::Repair, groups, step.interruptible);
    } else {
        ActionMsg msg = base_action(kind, ctx, flow.strategy);
        if (kind == ActionKind::SaveCkpt) msg.save = run.save;
        out = kind == ActionKind::RebuildGroup ? rebuild_groups(flow, step, ctx, msg, run)
                                               : host_.act(kind, {{step_targets(step, run), msg}}, step.interruptible);
    }
    if (kind == ActionKind::Stop) ctx.stopped = true;
    if (kind == ActionKind::Clean) run.clean_results = out.results;
    if (kind == ActionKind::RebuildGroup) {
        std::string why = retire_leavers(flow, out, ctx, run);
        if (!why.empty()) return why;
    }
    if (!out.ok()) return step.names_failed ? step.failure + (" " + list_text(out.failed)) : step.failure;
    if (kind == ActionKind::Normal) host_.running(run.targets);
    return "";
}

// REBUILD_GROUP names the ranks being replaced (the handler's fault_ranks). One that changes the
// data-parallel size (Flow::relayouts) is a relayout: a rank leaving with its slice reports no layout.
ActionOutcome FlowRunner::rebuild_groups(const Flow& flow, const FlowStep& step, const FaultContext& ctx, ActionMsg msg,
                                         const FlowRun& run) {
    msg.error_ranks.assign(ctx.replace.begin(), ctx.replace.end());
    msg.absent_ranks.assign(ctx.absent.begin(), ctx.absent.end());
    const std::set<int> targets = step_targets(step, run);
    if (!flow.relayouts) return host_.act(ActionKind::RebuildGroup, {{targets, msg}}, step.interruptible);
    host_.begin_relayout();
    ActionOutcome out = host_.act(ActionKind::RebuildGroup, {{targets, msg}}, step.interruptible);
    std::set<int> reporters = targets;
    for (const auto& [rank, result] : out.results) {
        if (result == kLeavesTheJob) reporters.erase(rank);
    }
    host_.end_relayout(reporters, out.ok());
    return out;
}

// REBUILD_GROUP of a scale-in: a live rank of a data-parallel slice that lost a rank replies that it
// leaves the job (kLeavesTheJob; the ranks' plan, core/layout/scale_in_plan, says who). It is retired as the
// lost ranks are (a scale-out waits for its return too), and the flow's later actions skip it. In a partial
// scale-out a returned rank whose slice has an absent rank leaves again (core/layout/scale_out_plan): it
// stays retired. Only these go on without a rank that replied: in any other case the reply fails the action.
std::string FlowRunner::retire_leavers(const Flow& flow, const ActionOutcome& out, FaultContext& ctx, FlowRun& run) {
    std::set<int> leavers, strangers;
    for (const auto& [rank, result] : out.results) {
        if (result != kLeavesTheJob) continue;
        leavers.insert(rank);
        if (flow.strategy == Strategy::ScaleOut && (ctx.absent.empty() || !ctx.replace.count(rank))) strangers.insert(rank);
    }
    if (leavers.empty()) return "";
    if (flow.strategy != Strategy::ScaleIn && flow.strategy != Strategy::ScaleOut) {
        return "ranks " + list_text(leavers) + " replied to REBUILD_GROUP that they leave the job, which only a "
               "scale-in or a partial scale-out allows";
    }
    if (!strangers.empty()) {
        return "ranks " + list_text(strangers) + " replied to REBUILD_GROUP that they leave the job, which in a "
               "scale-out only a returned rank of a partial one may";
    }
    for (int rank : leavers) {
        run.targets.erase(rank);
        ctx.replace.erase(rank);
        if (flow.strategy == Strategy::ScaleOut) ctx.absent.insert(rank);
    }
    host_.retire(leavers, flow.strategy == Strategy::ScaleIn ? Leaving::WithSlice : Leaving::Again);
    return "";
}

}  // namespace mindio
