// The controller's side of the recovery flows' steps (FlowHost, flow_runner.h): states, targets, savers,
// relayouts, offline ranks and the exit.
#include "common/log.h"
#include "common/text.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

// The layout of the old size names shards and holders the job no longer has (or, after a scale-out,
// lacks the returned ranks): forgotten, and rebuilt from what each rank reports while it rebuilds its
// groups. A processor sends its report before its reply on the same connection, and this controller
// reads a connection's frames in order: once the action succeeded, every report is in.
void Controller::begin_relayout() {
    std::lock_guard<std::mutex> lock(mu_);
    replicas_.clear();
    elastic_.begin_relayout();
}

void Controller::end_relayout(const std::set<int>& targets, bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::set<int> silent = elastic_.end_relayout(targets);
    if (!ok) return;  // the flow falls back to the exit: no later fault is planned on this layout
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

ActionOutcome Controller::act(ActionKind kind, const ActionGroups& groups, bool interruptible) {
    return actions_.run(kind, groups, interruptible, cfg_.action_timeout_ms);
}

void Controller::take_offline(const std::set<int>& ranks) {
    std::lock_guard<std::mutex> lock(mu_);
    take_offline_locked(ranks);
}

void Controller::enter_repair(const std::string& why) { transition(State::Repair, why); }

void Controller::return_retired(const std::set<int>& ranks) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int rank : ranks) {
        ranks_[rank].retired = false;
        event_locked("rejoined", "rank " + std::to_string(rank));
    }
}

void Controller::running(const std::set<int>& ranks) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int r : ranks) ranks_[r].run = RunStatus::Running;
}

void Controller::begin(const Flow& flow, FaultContext& ctx, FlowRun& run) {
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
    exclude_untrusted_savers(ranks_.snapshot(), intake_.pending(), ctx.unavailable);
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

void Controller::finish(const Flow& flow, const FaultContext& ctx) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (flow.replaces) {
            // A new process holds the state of the repair step from now on, as the survivors do. Until its first
            // step's report it would otherwise count as behind (step -1): a fault before that report found no
            // complete replica of its shards, and a PRELOCK waited for it in vain.
            for (int r : ctx.replace) {
                RankEntry& entry = ranks_[r];
                entry.joining = entry.ready = false;
                entry.step = ctx.repair_step;
                entry.data = DataStatus::Updated;
            }
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
