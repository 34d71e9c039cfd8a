// The recovery flows (flows.h) as Controller runs them: steps, actions, savers, relayouts and exit.
#include "common/log.h"
#include "common/text.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

ActionMsg Controller::base_action(ActionKind kind, const FaultContext& ctx, Strategy s) const {
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

// Runs `flow`'s steps in order; the first that fails hands its reason to the flow's fallback.
void Controller::run_flow(const Flow& flow, FaultContext& ctx, const std::string& reason) {
    FlowRun run;
    run.reason = reason;
    for (const FlowStep& step : flow.steps) {
        if (!lease_holds_within_flow()) return;
        std::string why = run_step(flow, step, ctx, run);
        if (why.empty()) continue;
        if (!lease_holds_within_flow()) return;  // the fallback acts too
        if (scales_in_instead(flow, step)) return run_flow(flow_for(Strategy::ScaleIn), ctx, why);
        if (flow.fallback == Strategy::Dump) return run_flow(flow_for(Strategy::Dump), ctx, why);
        return exit_all(why, 499);
    }
}

// The layout of the old size names shards and holders the job no longer has (or, after a scale-out,
// lacks the returned ranks): forgotten, and rebuilt from what each rank reports while it rebuilds its
// groups. A processor sends its report before its reply on the same connection, and this controller
// reads a connection's frames in order: once the action succeeded, every report is in.
void Controller::begin_relayout_locked() {
    replicas_.clear();
    relayout_reporters_.clear();
    relayout_ = true;
}

void Controller::end_relayout_locked(const std::set<int>& targets, bool ok) {
    relayout_ = false;
    if (!ok) return;  // the flow falls back to the exit: no later fault is planned on this layout
    std::set<int> silent;
    for (int r : targets) {
        if (!relayout_reporters_.count(r)) silent.insert(r);
    }
    if (!silent.empty() || replicas_.empty()) {
        // Not a reason to stop a job that trains well: its next fault is planned on what was reported (no
        // layout at all: that fault ends without a dump).
        std::string detail = "ranks " + list_text(silent) + " reported no replica layout at the new size; the layout " +
                             "is now " + (replicas_.empty() ? "unknown" : replicas_.describe());
        event_locked("relayout_incomplete", detail);
        LOG_WARN(kLog, cfg_.rank, detail);
        return;
    }
    event_locked("relayout", replicas_.describe());
    LOG_INFO(kLog, cfg_.rank, "replica layout at the new size, reported by ranks " << list_text(targets) << ": "
                                  << replicas_.describe());
}

// One step of a flow; returns why the flow cannot go on, empty when it can.
std::string Controller::run_step(const Flow& flow, const FlowStep& step, FaultContext& ctx, FlowRun& run) {
    switch (step.op) {
        case FlowOp::Begin: begin_flow(flow, ctx, run); return "";
        case FlowOp::Act: return run_flow_action(flow, step, ctx, run);
        case FlowOp::ReportStopComplete: report_cluster(ClusterReport{"report_stop_complete"}); return "";
        case FlowOp::TakeOffline: {
            std::lock_guard<std::mutex> lock(mu_);
            take_offline_locked(ctx.replace);
            return "";
        }
        case FlowOp::AwaitReplacements: {
            std::string why;
            await_replacements(ctx.replace, &why);
            return why;
        }
        case FlowOp::EnterRepair:
            transition(State::Repair, flow.repair_why(ctx));
            if (flow.replaces) run.targets.insert(ctx.replace.begin(), ctx.replace.end());
            return "";
        case FlowOp::Finish: finish_flow(flow, ctx); return "";
        case FlowOp::BeginDump: begin_dump(run); return "";
        case FlowOp::PickSavers: return pick_savers(ctx, run);
        case FlowOp::FinishByExit: exit_all(flow.finish_why(ctx), 0); return "";
        case FlowOp::BeginScaleIn: begin_scale_in(ctx, run); return "";
        case FlowOp::RetireLost: {
            std::lock_guard<std::mutex> lock(mu_);
            retire_locked(ctx.replace);
            return "";
        }
        case FlowOp::HandOver: return hand_over(ctx, run);
        case FlowOp::ReturnRetired: {
            std::lock_guard<std::mutex> lock(mu_);
            for (int rank : ctx.replace) {
                ranks_[rank].retired = false;
                event_locked("rejoined", "rank " + std::to_string(rank));
            }
            return "";
        }
    }
    return "";
}

void Controller::begin_flow(const Flow& flow, FaultContext& ctx, FlowRun& run) {
    std::lock_guard<std::mutex> lock(mu_);
    // Every action names the step to load.
    if (flow.may_reload && ctx.reload_step >= 0) ctx.repair_step = repair_step_ = ctx.reload_step;
    transition_locked(State::EnvClear, flow.begin_why(ctx));
    run.targets = ranks_.live();
    if (flow.replaces && !flow.hands_over) {
        for (int r : ctx.replace) run.targets.erase(r);
    }
}

void Controller::begin_dump(FlowRun& run) {
    std::lock_guard<std::mutex> lock(mu_);
    transition_locked(State::Dump, run.reason);
    event_locked("dump", run.reason);
    run.targets = ranks_.live();
}

// The dump's savers, from what is known now (ranks may have died or faulted since the decision);
// empty when they hold a complete replica, otherwise why no dump is possible.
std::string Controller::pick_savers(FaultContext& ctx, FlowRun& run) {
    std::lock_guard<std::mutex> lock(mu_);
    exclude_untrusted_savers(ranks_.snapshot(), pending_faults_, ctx.unavailable);
    SaverPlan plan = replicas_.savers(ctx.unavailable);
    std::string refusal = dump_refusal(replicas_, plan);
    if (!refusal.empty()) return refusal;
    for (const auto& [type, ranks] : plan.ranks_by_type()) {
        run.save.push_back({static_cast<uint8_t>(type), std::vector<int32_t>(ranks.begin(), ranks.end())});
        run.savers.insert(ranks.begin(), ranks.end());
        event_locked("savers", "type " + std::to_string(type) + " step " + std::to_string(ctx.repair_step) + " " +
                                   list_text(ranks));
    }
    return "";
}

std::set<int> Controller::step_targets(const FlowStep& step, const FlowRun& run) {
    switch (step.targets) {
        case FlowTargets::Flow: return run.targets;
        case FlowTargets::Savers: return run.savers;
        case FlowTargets::OneSaver: return {*run.savers.begin()};
    }
    return {};
}

// Runs one action of a flow on its targets; why the flow cannot go on, empty when it can.
std::string Controller::run_flow_action(const Flow& flow, const FlowStep& step, FaultContext& ctx, FlowRun& run) {
    const ActionKind kind = step.action;
    if (step.unless_stopped && ctx.stopped) return "";
    ActionOutcome out;
    if (kind == ActionKind::Repair) {
        const bool reload = flow.may_reload && ctx.reload_step >= 0;
        ActionGroups groups = reload ? reload_messages(ctx, run.targets, flow.strategy)
                                     : repair_messages(ctx, flow.strategy, run.clean_results);
        if (groups.empty() && step.skip_if_none) return "";
        out = actions_.run(ActionKind::Repair, groups, step.interruptible, cfg_.action_timeout_ms);
    } else {
        ActionMsg msg = base_action(kind, ctx, flow.strategy);
        // The handler's fault_ranks.
        if (kind == ActionKind::RebuildGroup) msg.error_ranks.assign(ctx.replace.begin(), ctx.replace.end());
        if (kind == ActionKind::SaveCkpt) msg.save = run.save;
        const bool relayout = kind == ActionKind::RebuildGroup && flow.relayouts;
        if (relayout) {
            std::lock_guard<std::mutex> lock(mu_);
            begin_relayout_locked();
        }
        out = actions_.run_all(kind, step_targets(step, run), msg, step.interruptible);
        if (relayout) {
            std::set<int> reporters = step_targets(step, run);  // a rank leaving with its slice reports nothing
            for (const auto& [rank, result] : out.results) {
                if (result == kLeavesTheJob) reporters.erase(rank);
            }
            std::lock_guard<std::mutex> lock(mu_);
            end_relayout_locked(reporters, out.ok());
        }
    }
    if (kind == ActionKind::Stop) ctx.stopped = true;
    if (kind == ActionKind::Clean) run.clean_results = out.results;
    if (kind == ActionKind::RebuildGroup) {
        std::string why = retire_leavers(flow, out, run);
        if (!why.empty()) return why;
    }
    if (!out.ok()) return step.names_failed ? step.failure + (" " + list_text(out.failed)) : step.failure;
    if (kind == ActionKind::Normal) {
        std::lock_guard<std::mutex> lock(mu_);
        for (int r : run.targets) ranks_[r].run = RunStatus::Running;
    }
    return "";
}

// REBUILD_GROUP of a scale-in: a live rank of a data-parallel slice that lost a rank replies that it
// leaves the job (kLeavesTheJob; the ranks' plan, core/layout/scale_in_plan, says who). It is retired as the
// lost ranks are (a scale-out waits for its return too), and the flow's later actions skip it. Only a
// scale-in goes on without a live rank: in any other flow the reply fails the action.
std::string Controller::retire_leavers(const Flow& flow, const ActionOutcome& out, FlowRun& run) {
    std::set<int> leavers;
    for (const auto& [rank, result] : out.results) {
        if (result == kLeavesTheJob) leavers.insert(rank);
    }
    if (leavers.empty()) return "";
    if (flow.strategy != Strategy::ScaleIn) {
        return "ranks " + list_text(leavers) + " replied to REBUILD_GROUP that they leave the job, which only a "
               "scale-in allows";
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (int rank : leavers) run.targets.erase(rank);
    event_locked("left_with_slice", "ranks " + list_text(leavers));
    LOG_INFO(kLog, cfg_.rank, "elastic training: ranks " << list_text(leavers) << " leave the job with their "
                                  "data-parallel slices, which lost a rank; the survivors go on without them");
    retire_locked(leavers);
    return "";
}

void Controller::finish_flow(const Flow& flow, const FaultContext& ctx) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (flow.replaces) {
            for (int r : ctx.replace) ranks_[r].joining = ranks_[r].ready = false;
        }
        transition_locked(State::Normal, flow.finish_why(ctx));
    }
    ClusterReport result{"report_result"};
    result.strategy = flow.result;
    report_cluster(result);
}

// The REPAIR action of every rank taking part (plan_repair): each rank its own message, since the
// ranks' repair types differ.
ActionGroups Controller::repair_messages(const FaultContext& ctx, Strategy s,
                                                    const std::map<int, int>& clean_results) {
    std::lock_guard<std::mutex> lock(mu_);
    RepairAssignment assignment = plan_repair(replicas_.repair_pairs(ctx.unavailable), ctx, clean_results);
    for (const auto& info : assignment.by_type) {
        event_locked("repair_plan", "type " + std::to_string(info.optimizer_type) + " src=" + list_text(info.src) +
                                        " dst=" + list_text(info.dst));
    }
    ActionGroups groups;
    for (auto& [rank, repair] : assignment.by_rank) {
        ActionMsg msg = base_action(ActionKind::Repair, ctx, s);
        msg.repair = std::move(repair);
        groups.push_back({{rank}, std::move(msg)});
    }
    return groups;
}

// LOAD_CKPT: no live replica holds some shard, so every rank loads the last periodic checkpoint
// again (a scale-in: the dump it just wrote, at the smaller size); ROLLBACK then takes every rank to
// that step.
ActionGroups Controller::reload_messages(const FaultContext& ctx, const std::set<int>& ranks, Strategy s) const {
    ActionMsg msg = base_action(ActionKind::Repair, ctx, s);
    msg.repair.push_back(reload_info(ranks));
    return {{ranks, msg}};
}

void Controller::exit_all(const std::string& why, int result) {
    std::set<int> live;
    {
        std::lock_guard<std::mutex> lock(mu_);
        transition_locked(State::Exit, why);
        event_locked("exit", why);
        // Ranks excluded for failing an action are alive and waiting for a decision too.
        for (size_t i = 0; i < ranks_.size(); ++i) {
            if (ranks_[i].registered && !ranks_[i].dead && !ranks_[i].left) live.insert(static_cast<int>(i));
        }
    }
    FaultContext none;
    {
        std::lock_guard<std::mutex> lock(mu_);
        none.repair_step = repair_step_;
    }
    actions_.run_all(ActionKind::Exit, live, base_action(ActionKind::Exit, none, Strategy::Exit), false,
                   cfg_.exit_timeout_ms);
    ClusterReport report{"report_result"};
    report.result = result;
    report.strategy = result == 0 ? "dump" : "exit";
    report_cluster(report);
}

}  // namespace mindio
