// Fault intake (members of Controller): faults, deaths, hangs, the decision, collection, saves, PRELOCK.
#include <algorithm>

#include "common/log.h"
#include "common/text.h"
#include "controller/controller.h"
#include "controller/controller_timing.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

void Controller::add_fault_locked(int rank, FaultKind kind, const std::string& why, const CodedReport* coded) {
    if (intake_.add(rank, kind, why, coded, state_ == State::Exit || state_ == State::Final)) cv_.notify_all();
}

// Death is a closed connection that no processor re-registered within one heartbeat period. Silence
// with the connection open is judged by judge_liveness_locked.
void Controller::detect_dead_locked() {
    for (int rank : ranks_.lost_connections()) {
        declare_dead_locked(rank, "connection lost and not re-registered within one heartbeat period");
    }
}

// A lost process: never sent an action again, and a process/node fault unless the job is ending. A
// retired rank's returned process that is lost is no fault: the job goes on without it, as it did.
void Controller::declare_dead_locked(int rank, const std::string& why) {
    RankEntry& r = ranks_[rank];
    const bool failed_replacement = awaited_.count(rank) && r.joining;
    r.dead = true;
    if (state_ == State::Exit || state_ == State::Final) return;
    if (r.retired) return return_lost_locked(rank, why);
    if (failed_replacement) {
        // A process that died while joining as a replacement takes nothing of the job with it (it holds no state
        // and is in no group yet): the wait goes on for the next one its launcher starts, within the same bound.
        r.joining = r.ready = false;
        event_locked("replacement_lost", "rank " + std::to_string(rank) + ": " + why);
        LOG_WARN(kLog, cfg_.rank, "the new process of rank " << rank << " was lost while joining (" << why
                                      << "); waiting for another");
        return;
    }
    event_locked("dead", "rank " + std::to_string(rank) + ": " + why);
    add_fault_locked(rank, FaultKind::Node, why);
}

// A replacement for a rank that is silent with its connection open means its node was taken over (a node
// cut off from the network keeps every connection open): the other ranks of its failure domain that are
// silent too are gone with it. Declared now, they are in the same recovery; left for their own
// replacements, the recovery of the first would wait on ranks that cannot answer, and fail.
void Controller::declare_silent_neighbours_dead_locked(int rank) {
    const std::string domain = ranks_[rank].domain;
    if (domain.empty()) return;
    const auto now = RankTable::Clock::now();
    for (int other = 0; other < cfg_.world_size; ++other) {
        const RankEntry& e = ranks_[other];
        if (other == rank || e.domain != domain || !e.registered || !e.connected || e.dead || e.left || e.joining) continue;
        auto silent_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.last_seen).count();
        if (silent_ms <= static_cast<int64_t>(e.heartbeat_ms)) continue;  // heard within its period: not gone
        declare_dead_locked(other, "silent for " + std::to_string(silent_ms) + " ms on node " + domain + " with rank " +
                                       std::to_string(rank) + ", whose replacement registered");
    }
}

void Controller::heard_from_locked(int rank) {
    if (auto silent = ranks_.heard_from(rank)) {
        event_locked("suspect_cleared", "rank " + std::to_string(rank) + " after " + std::to_string(*silent) + " ms");
        LOG_INFO(kLog, cfg_.rank, "rank " << rank << " heard again after " << *silent << " ms of silence: not a fault");
    }
}

// Suspects are logged once per silence; a hang found while training runs normally is a fault of the
// ranks the rule names (reported once until they show progress), handled like an unknown error.
void Controller::judge_liveness_locked() {
    LivenessNews news = ranks_.judge_liveness();
    for (const auto& [rank, detail] : news.suspects) {
        event_locked("suspect", detail);
        LOG_WARN(kLog, cfg_.rank, detail << ": a suspect, not dead; the hang rule decides");
    }
    if (news.hung.empty() || state_ != State::Normal) return;
    std::set<int> fresh = ranks_.take_unreported(news.hung);
    if (fresh.empty()) return;
    event_locked("hang", news.why);
    LOG_ERROR(kLog, cfg_.rank, "hang: " << news.why);
    for (int rank : fresh) {
        if (!ranks_[rank].suspect) {
            // It answers but its training thread is stuck. With process replacement on it is replaced
            // like a lost process (take_offline_locked tells it to exit, and a hung process ends itself
            // on EXIT); otherwise an unknown fault, whose STOP it cannot obey, so it never saves.
            if (cfg_.caps.recover) add_fault_locked(rank, FaultKind::Node, "hung, to be replaced: " + news.why);
            else add_fault_locked(rank, FaultKind::Unknown, "hung: " + news.why);
            continue;
        }
        // Silent as well: its process does not run, so it can answer no action; it is treated as lost.
        declare_dead_locked(rank, "silent and hung: " + news.why);
    }
}

FaultContext Controller::assess_locked(Faults faults, int64_t lock_step) {
    FaultContext ctx = assess(ranks_.snapshot(), std::move(faults), lock_step);
    repair_step_ = ctx.repair_step;
    return ctx;
}

void Controller::handle_fault() {
    std::unique_lock<std::mutex> lock(mu_);
    intake_.begin_flow();
    transition_locked(State::Abnormal, "fault reported");
    collect_faults(lock);
    await_saves(lock, intake_.pending());
    Faults faults = intake_.take();
    lock.unlock();
    int64_t lock_step = prelock(faults);
    lock.lock();
    // Faults that arrived during the prelock wait are handled with the first ones.
    intake_.take_into(faults);
    const Capabilities caps = caps_now_locked();
    Plan plan = plan_fault(ranks_.snapshot(), replicas_, caps, std::move(faults), lock_step);
    const bool scaled_in = scaled_in_locked();
    const bool again = scaled_in && plan.strategy == Strategy::Dump && scale_in_offerable(caps, plan.input);
    if (again) {
        plan.strategy = Strategy::ScaleIn;
        plan.why += "; scaled in: no process replacement at the smaller size, elastic training scales in again";
    } else if (scaled_in) {
        plan.why += "; scaled in: no online repair or process replacement at the smaller size, the dump of its "
                    "layout instead";
    }
    repair_step_ = plan.ctx.repair_step;
    FaultContext& ctx = plan.ctx;
    const Strategy own = plan.strategy;
    event_locked("decision", std::string(strategy_name(own)) + ": " + plan.why);
    LOG_INFO(kLog, cfg_.rank, "decision " << strategy_name(own) << ": " << plan.why);
    // A policy or the cluster manager may take a while to answer: the lock must hold meanwhile.
    if (policy_ || !cluster_.empty()) actions_.release_prelock_locked();
    lock.unlock();
    Strategy chosen = own;
    if (auto asked = consult_policy(ctx)) {
        // A scale-in while scaled in stands where the dump would: a policy may still ask for the dump or the exit.
        const bool milder = static_cast<int>(*asked) < static_cast<int>(Strategy::Dump);
        chosen = again && milder ? own : combine_with_policy(caps, plan.input, again ? Strategy::Dump : own, *asked);
        std::string detail = std::string("builtin ") + strategy_name(own) + ", policy " + strategy_name(*asked) +
                             " -> " + strategy_name(chosen);
        lock.lock();
        event_locked("policy_decision", detail);
        lock.unlock();
        LOG_INFO(kLog, cfg_.rank, "fault policy: " << detail);
    }
    chosen = consult_cluster(ctx, chosen, cluster_offer(plan, caps, chosen));
    if (chosen == Strategy::Recover && ctx.replace.empty()) replace_faulty(ctx);
    switch (chosen) {
        case Strategy::Retry:
        case Strategy::Recover: return flows_.run(flow_for(chosen), ctx);
        case Strategy::Dump: return flows_.run(flow_for(Strategy::Dump), ctx, "decided after " + plan.why);
        case Strategy::ScaleIn:  // the cluster manager's "downgrade", or a loss while scaled in: none is awaited
            if (ctx.replace.empty()) replace_faulty(ctx);
            return flows_.run(flow_for(Strategy::ScaleIn), ctx,
                              again
                                  ? "scaled in already: no process replacement at the smaller size"
                                  : "the cluster manager chose the scale-in (downgrade): no replacement is awaited");
        default: return exit_all("no recovery possible: " + exit_reason(plan) + scale_in_refusal(plan, caps.elastic), 499);
    }
}

// Faults rarely come alone (a dead rank makes its peers' collectives fail): gather for a moment, unless
// no later fault can change the decision (collection_can_close).
// A lost connection is judged one heartbeat period later (a processor may reconnect): a peer's
// communication error is often the first sign of a dead rank, and deciding before that judgement
// would repair or dump around a process that should be replaced.
void Controller::collect_faults(std::unique_lock<std::mutex>& lock) {
    const auto opened = Clock::now();
    const auto until = opened + std::chrono::milliseconds(cfg_.collect_ms);
    std::optional<std::string> rule;
    auto open_ms = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - opened).count(); };
    while (!stopping_ && Clock::now() < std::max(until, ranks_.connection_losses_settled(kTick))) {
        const bool losses_pending = ranks_.connection_losses_settled(kTick) != Clock::time_point::min();
        rule = collection_can_close(ranks_.snapshot(), intake_.pending(), open_ms(), losses_pending, bool(policy_));
        if (rule) break;
        cv_.wait_until(lock, Clock::now() + kTick);
        detect_dead_locked();
        judge_liveness_locked();
    }
    const auto waited = open_ms();
    std::string detail = rule ? "closed early after " + std::to_string(waited) + " ms: " + *rule
                              : "full window, " + std::to_string(waited) + " ms";
    event_locked("collect", detail);
    LOG_INFO(kLog, cfg_.rank, "collect: " << detail);
}

// No STOP into a checkpoint save: while healthy ranks are saving, the save may still complete, so the
// stop waits for it, bounded by MINDIO_SAVE_WAIT_S and by the saves' own limits. A save is collective:
// when a faulted rank was in it (its save failed, or it died there), the others are blocked on it and
// there is nothing to wait for. A save that does not end is abandoned by the STOP; Megatron marks a
// checkpoint latest only once it is complete, and the dump replaces what an abandoned save left.
void Controller::await_saves(std::unique_lock<std::mutex>& lock, const Faults& faults) {
    auto saving = [&] {
        std::set<int> ranks;
        for (int r : ranks_.live()) {
            if (ranks_[r].connected && ranks_[r].section == Section::Save && !faults.count(r)) ranks.insert(r);
        }
        return ranks;
    };
    std::set<int> first = saving();
    if (first.empty() || cfg_.save_wait_ms <= 0) return;
    std::set<int> broken;
    for (const auto& [rank, fault] : faults) {
        if (ranks_[rank].last_section == Section::Save) broken.insert(rank);
    }
    if (!broken.empty()) {
        std::string detail = "ranks " + list_text(first) + " are saving a checkpoint that cannot complete: faulted ranks " +
                             list_text(broken) + " were in the save; it is abandoned at once";
        event_locked("save_wait", detail);
        LOG_INFO(kLog, cfg_.rank, detail);
        return;
    }
    int64_t bound_ms = cfg_.save_wait_ms;
    for (int r : first) {
        if (ranks_[r].limit_ms > 0) bound_ms = std::min(bound_ms, std::max<int64_t>(0, ranks_[r].limit_ms - ranks_[r].section_ms));
    }
    auto started = Clock::now();
    LOG_INFO(kLog, cfg_.rank, "ranks " << list_text(first) << " are saving a checkpoint: waiting up to " << bound_ms
                                       << " ms for the save to finish before stopping them");
    auto deadline = started + std::chrono::milliseconds(bound_ms);
    while (!stopping_ && Clock::now() < deadline && !saving().empty()) {
        cv_.wait_until(lock, Clock::now() + kTick);
        detect_dead_locked();
    }
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
    std::set<int> still = saving();
    std::string detail = still.empty() ? "save finished after " + std::to_string(waited) + " ms"
                                       : "ranks " + list_text(still) + " still saving after " + std::to_string(waited) +
                                             " ms: the save is abandoned";
    event_locked("save_wait", detail);
    LOG_INFO(kLog, cfg_.rank, detail);
}

// PRELOCK, as the reference: repair_step = the highest completed step among the ranks whose status
// is known; every live rank is told that no update may start, and ranks behind it that are not
// faulty get prelock_tries waits of prelock_timeout_ms to finish their update up to it. Returns the
// repair step; who is still behind afterwards is for assess_locked to judge.
// Not waited for: the update peers of a faulty rank that did not complete the repair step (a fault in
// the optimizer phase while the other replica instance completed it). Their update needs the faulty
// rank's collectives, so they can never catch up; they are repaired from a peer that did.
int64_t Controller::prelock(const Faults& faults) {
    PrelockPlan plan;
    {
        std::lock_guard<std::mutex> lock(mu_);
        plan = plan_prelock(ranks_.snapshot(), replicas_, intake_.faulty(faults));
        if (!plan.blocked.empty()) {
            event_locked("prelock_skip", "step " + std::to_string(plan.step) + " blocked " + list_text(plan.blocked));
            LOG_INFO(kLog, cfg_.rank, "prelock at step " << plan.step << ": not waiting for ranks " << list_text(plan.blocked)
                                                         << ", whose update needs a faulty rank behind that step");
        }
    }
    const int64_t step = plan.step;
    if (plan.live.empty() || step < 0) return step;
    FaultContext ctx;
    ctx.repair_step = step;
    ctx.faults = faults;
    ActionMsg msg = base_action(ActionKind::Prelock, ctx, Strategy::None);
    if (plan.level) {
        // Every healthy rank completed the repair step and none is mid-update: nobody has an update to
        // finish, so the decision need not wait for the replies (at 16k ranks that round trip was most
        // of the fault-to-STOP latency). The lock is still sent so that a late start_updating raises
        // FORCE STOP; the processors run it before the STOP that follows (sequence order). It is held
        // back until that next action (or a wait of the decision, see handle_fault) and leaves with it.
        std::lock_guard<std::mutex> lock(mu_);
        actions_.hold_prelock_locked(plan.live, msg);
        return step;
    }
    // Not interruptible: a fault during the lock is gathered with the first ones, not a second fault.
    actions_.run_all(ActionKind::Prelock, plan.live, msg, false);
    std::unique_lock<std::mutex> lock(mu_);
    // Faults reported during the wait count as well: a newly faulty rank is not waited for.
    auto laggards = [&] { return prelock_laggards(ranks_.snapshot(), plan, intake_.faulty(faults)); };
    std::set<int> behind = laggards();
    if (behind.empty()) return step;
    event_locked("prelock_wait", "step " + std::to_string(step) + " laggards " + list_text(behind));
    LOG_INFO(kLog, cfg_.rank, "prelock at step " << step << ": waiting for " << list_text(behind));
    for (int attempt = 1; attempt <= cfg_.prelock_tries && !behind.empty() && !stopping_; ++attempt) {
        auto until = Clock::now() + std::chrono::milliseconds(cfg_.prelock_timeout_ms);
        while (!stopping_ && !(behind = laggards()).empty() && Clock::now() < until) {
            cv_.wait_until(lock, std::min(until, Clock::now() + kTick));
            detect_dead_locked();
        }
        if (!behind.empty()) {
            event_locked("prelock_timeout", "try " + std::to_string(attempt) + "/" + std::to_string(cfg_.prelock_tries) +
                                                " laggards " + list_text(behind));
        }
    }
    if (behind.empty()) event_locked("prelock_done", "step " + std::to_string(step));
    else LOG_WARN(kLog, cfg_.rank, "ranks " << list_text(behind) << " did not reach step " << step << " after the prelock");
    return step;
}

}  // namespace mindio
