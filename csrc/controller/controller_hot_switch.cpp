// Hot switch (members of Controller): a live rank, or several (a node's), handed over to new processes with
// no step lost. The request is checked first (nothing changes on a refusal); then every rank holds after one
// step, as in a pause (controller_pause.cpp); once they all do, PRELOCK at that step and the hot_switch flow
// (flows.cpp): STOP and CLEAN everywhere, EXIT (strategy hot_switch) to the leaving ranks, whose launchers start
// their new processes, then REBUILD_GROUP, REPAIR from live replica peers, ROLLBACK to the held step, NORMAL.
// It is no fault: nothing is charged to the leaving ranks' nodes, and a fault before the hand-over begins
// gives the switch up for the fault's own recovery.
#include "common/log.h"
#include "common/text.h"
#include "controller/controller.h"
#include "controller/controller_timing.h"

#include <sstream>

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

Faults handed_over(const std::set<int>& ranks) {
    Faults faults;
    for (int rank : ranks) faults.emplace(rank, Fault{FaultKind::Node, "handed over to a new process (hot switch)", {}});
    return faults;
}

}  // namespace

std::string Controller::notify_hot_switch(const std::set<int>& ranks, int64_t after_step) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string refusal = hot_switch_refusal_locked(ranks);
    if (!refusal.empty()) return refusal;
    std::string why;
    const int64_t step = pause_step(pause_sightings_locked(), after_step, &why);
    if (step < 0) return why;
    requests_.pausing = Pausing{step, cfg_.action_timeout_ms, true, Clock::now(), {}, std::nullopt};
    requests_.switching = ranks;
    requests_.hot_switch = true;
    LOG_INFO(kLog, cfg_.rank, "hot switch asked for: ranks " << list_text(ranks) << " to new processes after step " << step);
    event_locked("hot_switch_asked", "ranks " + list_text(ranks) + " after step " + std::to_string(step));
    cv_.notify_all();
    return "";
}

std::string Controller::cancel_hot_switch() {
    std::lock_guard<std::mutex> lock(mu_);
    if (requests_.switching.empty()) return "no hot switch is asked for";
    if (state_ != State::Normal) {
        return "the hot switch of ranks " + list_text(requests_.switching) +
               " has begun (every rank holds): it is no longer withdrawn";
    }
    event_locked("hot_switch_withdrawn", "ranks " + list_text(requests_.switching));
    if (requests_.hot_switch) {  // its flow has not started: nothing was sent
        LOG_INFO(kLog, cfg_.rank, "the hot switch of ranks " << list_text(requests_.switching)
                                                           << " is withdrawn before it began");
        requests_.hot_switch = false;
        requests_.pausing.asked_for = false;
        requests_.switching.clear();
    } else {
        requests_.resume = true;  // the flow waits for the ranks to hold: it gives the switch up and continues them
    }
    cv_.notify_all();
    return "";
}

// Why `ranks` cannot be switched now, or "".
std::string Controller::hot_switch_refusal_locked(const std::set<int>& ranks) const {
    if (!leadership_.may_lead()) return "this controller does not lead the job (" + leadership_.not_leading() + ")";
    if (!cfg_.caps.recover) {
        return "process replacement (ARF, --enable-worker-reboot) is off: nothing would take the ranks over";
    }
    if (requests_.pausing.asked_for || requests_.hot_switch) return "a pause or a hot switch is already asked for";
    if (state_ != State::Normal || intake_.flow_active() || intake_.has_pending()) {
        return std::string("the job is in state ") + state_name(state_) + ": only a job training normally switches";
    }
    if (scaled_in_locked()) return "the job is scaled in (elastic training): no rank is switched at the smaller size";
    if (ranks.empty()) return "no rank named";
    const std::set<int> live = ranks_.live();
    for (int rank : ranks) {
        if (rank < 0 || rank >= cfg_.world_size) {
            return "rank " + std::to_string(rank) + " is not a rank of this job (world size " +
                   std::to_string(cfg_.world_size) + ")";
        }
        if (!live.count(rank)) return "rank " + std::to_string(rank) + " is not a live member of the job";
        if (rank == cfg_.rank) return "rank " + std::to_string(rank) + " hosts this controller";
    }
    if (ranks.size() >= live.size()) return "every live rank is named: nobody would be left to hand the state over";
    // The switch happens at a hold, where every rank completed the same step: the shards are judged as they will
    // be then. Judged by where each rank is in its step now, one in its update counted as behind and a peer's
    // switch was refused at random (a busy machine, tests/integration/test_hot_switch_requests).
    RankSnapshots held = ranks_.snapshot();
    for (RankSnapshot& rank : held) rank.step = 0, rank.data = DataStatus::Updated;
    Plan plan = plan_fault(held, replicas_, cfg_.caps, handed_over(ranks), 0);
    if (!plan.input.repairable) {
        return "some shard of ranks " + list_text(ranks) + " has no live replica peer outside them (the new processes "
               "take their state from one; --optimizer-replicas 1 has none)";
    }
    return "";
}

void Controller::give_up_hot_switch(std::unique_lock<std::mutex>& lock, const std::string& why, bool continue_ranks) {
    LOG_WARN(kLog, cfg_.rank, "the hot switch of ranks " << list_text(requests_.switching) << " is given up: " << why);
    event_locked("hot_switch_given_up", "ranks " + list_text(requests_.switching) + ": " + why);
    requests_.switching.clear();
    requests_.pausing.asked_for = false;
    if (!continue_ranks) return;  // a fault is handled next: its recovery's first action releases the held ranks
    lock.unlock();
    end_pause("the hot switch was given up (" + why + ")");
}

void Controller::hot_switch_flow() {
    std::unique_lock<std::mutex> lock(mu_);
    intake_.begin_flow();
    requests_.hot_switch = false;
    const std::set<int> leaving = requests_.switching, live = send_pause(lock);
    HoldVerdict v = await_hold(lock);
    if (stopping_ || intake_.has_pending()) return give_up_hot_switch(lock, "a fault came first", false);
    if (requests_.resume) return give_up_hot_switch(lock, "withdrawn (stop switch)", true);
    if (v.kind != HoldVerdict::Holding) {
        return give_up_hot_switch(lock, v.kind == HoldVerdict::Passed ? "rank " + std::to_string(v.rank) +
                                                                            " completed a later step first"
                                        : v.kind == HoldVerdict::Ended ? "rank " + std::to_string(v.rank) +
                                                                             " finished training"
                                                                       : "ranks " + list_text(v.behind) +
                                                                             " did not hold in time",
                                  true);
    }
    const Faults faults = handed_over(leaving);
    Plan plan = plan_fault(ranks_.snapshot(), replicas_, caps_now_locked(), faults, requests_.pausing.step);
    if (!plan.input.repairable) {  // a holder died since the request
        return give_up_hot_switch(lock, "some shard of ranks " + list_text(leaving) + " has no live replica peer now", true);
    }
    const Pausing& pause = requests_.pausing;
    std::ostringstream text;
    text << "training paused after step " << pause.step << " for the hot switch of ranks " << list_text(leaving)
         << ": all " << live.size() << " ranks hold, " << std::chrono::duration<double>(Clock::now() - pause.asked).count()
         << " s after the request";
    transition_locked(State::Pause, text.str());
    event_locked("hot_switch", "ranks " + list_text(leaving) + " after step " + std::to_string(requests_.pausing.step));
    FaultContext ctx = plan.ctx;
    replace_faulty(ctx);
    repair_step_ = ctx.repair_step;
    requests_.switching.clear();
    requests_.pausing.asked_for = false;
    FaultContext lock_ctx;
    lock_ctx.repair_step = ctx.repair_step;
    lock_ctx.faults = faults;
    lock.unlock();
    // The held ranks leave their hold into FORCE STOP (not into their update) only under a PRELOCK.
    actions_.run_all(ActionKind::Prelock, live, base_action(ActionKind::Prelock, lock_ctx, Strategy::None), false);
    flows_.run(flow_for(Strategy::HotSwitch), ctx);
}

// The leaving ranks, parked after STOP and CLEAN, are told to exit (EXIT, strategy hot_switch): each exits 0
// and its launcher starts its new process. Offline from now on; a rank that did not answer is cut off all the
// same, its new process awaited as any replacement.
std::string Controller::hand_over(const FaultContext& ctx, FlowRun& run) {
    for (int rank : ctx.replace) run.targets.erase(rank);
    ActionOutcome out = actions_.run_all(ActionKind::Exit, ctx.replace, base_action(ActionKind::Exit, ctx, Strategy::HotSwitch),
                                         true);
    std::lock_guard<std::mutex> lock(mu_);
    for (int rank : ctx.replace) {
        RankEntry& r = ranks_[rank];
        event_locked("offline", "rank " + std::to_string(rank) + " (handed over)");
        r.dead = true;
        if (r.connected) server_.close(r.conn, "rank handed over (hot switch)");
    }
    if (!out.ok()) LOG_WARN(kLog, cfg_.rank, "ranks " << list_text(out.failed) << " did not answer the hand-over's EXIT");
    LOG_INFO(kLog, cfg_.rank, "ranks " << list_text(ctx.replace) << " handed over; waiting up to " << cfg_.arf_wait_ms
                                       << " ms (MINDIO_ARF_WAIT_S) for their new processes");
    return "";
}

}  // namespace mindio
