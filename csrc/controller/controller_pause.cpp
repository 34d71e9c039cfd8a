// Pause and continue at a step boundary (pause.h) as Controller runs them: the request, PAUSE to every
// live rank, the wait until each holds after the step, and the end of the pause (asked for, or its hold
// limit reached), by CONTINUE. A fault meanwhile is handled as in training: its recovery's PRELOCK and STOP
// release the held ranks, and its NORMAL ends the pause.
#include "common/log.h"
#include "common/text.h"
#include "controller/controller.h"
#include "controller/controller_timing.h"

#include <sstream>

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

std::string Controller::notify_pause(int64_t after_step, int hold_ms) {
    std::lock_guard<std::mutex> lock(mu_);
    if (hold_ms < 1000 || hold_ms > kMaxPauseHoldMs) {
        return "a pause holds from 1 s to " + std::to_string(kMaxPauseHoldMs / 3600000) + " h, not " +
               std::to_string(hold_ms) + " ms";
    }
    if (!leadership_.may_lead()) return "this controller does not lead the job (" + leadership_.not_leading() + ")";
    if (requests_.pausing.asked_for) return "a pause is already asked for";
    if (state_ != State::Normal || intake_.flow_active() || intake_.has_pending()) {
        return std::string("the job is in state ") + state_name(state_) + ": only a job training normally is paused";
    }
    std::string why;
    const int64_t step = pause_step(pause_sightings_locked(), after_step, &why);
    if (step < 0) return why;
    requests_.pausing = Pausing{step, hold_ms, true, Clock::now(), {}, std::nullopt};
    requests_.pause = true;
    requests_.resume = false;
    LOG_INFO(kLog, cfg_.rank, "pause asked for: after step " << step << ", holding at most " << hold_ms / 1000.0 << " s");
    cv_.notify_all();
    return "";
}

std::map<int, PauseSighting> Controller::pause_sightings_locked() const {
    std::map<int, PauseSighting> live;
    for (int rank : ranks_.live()) {
        const RankEntry& r = ranks_[rank];
        live[rank] = PauseSighting{r.step, r.run == RunStatus::Paused, r.finished};
    }
    return live;
}

// Run by the state machine's loop: a pause that every rank holds ends by itself at its hold limit.
void Controller::expire_pause_locked() {
    const Pausing& pause = requests_.pausing;
    if (state_ != State::Pause || !pause.until || Clock::now() < *pause.until || requests_.resume) return;
    LOG_INFO(kLog, cfg_.rank, "the pause after step " << pause.step << " reached its hold limit of "
                                  << pause.hold_ms / 1000.0 << " s");
    requests_.resume = true;
}

void Controller::pause_flow() {
    std::unique_lock<std::mutex> lock(mu_);
    Pausing& pause = requests_.pausing;
    intake_.begin_flow();
    requests_.pause = false;
    if (state_ == State::Pause) {
        const bool limit = pause.until && Clock::now() >= *pause.until;
        lock.unlock();
        return end_pause(limit ? "its hold limit was reached" : "continue was asked for");
    }
    const std::set<int> live = send_pause(lock);
    HoldVerdict v = await_hold(lock);
    if (stopping_ || intake_.has_pending()) {
        LOG_WARN(kLog, cfg_.rank, "the pause after step " << pause.step << " is given up: a fault came first");
        pause.asked_for = false;
        return;  // the fault is handled next; its recovery's first action ends the pause on every rank
    }
    if (v.kind == HoldVerdict::Holding) {
        // PAUSE only now: until every rank holds, the job trains (the ledger and the hang rule see it so)
        std::ostringstream text;
        text << "training paused after step " << pause.step << ": all " << live.size() << " ranks hold before "
             << "their next update, " << seconds_since(pause.asked) << " s after the request; it continues when "
             << "asked, or after " << pause.hold_ms / 1000.0 << " s";
        transition_locked(State::Pause, text.str());
        pause.held_since = Clock::now();
        pause.until = pause.held_since + std::chrono::milliseconds(pause.hold_ms);
        event_locked("paused", "after step " + std::to_string(pause.step));
        return;
    }
    std::string why = requests_.resume ? "continue was asked for before every rank held"
                      : v.kind == HoldVerdict::Passed ? "rank " + std::to_string(v.rank) + " completed step " +
                                                            std::to_string(v.rank_step) + " before the pause reached it"
                      : v.kind == HoldVerdict::Ended ? "rank " + std::to_string(v.rank) + " finished training"
                                                     : "ranks " + list_text(v.behind) + " did not hold within " +
                                                           std::to_string(cfg_.action_timeout_ms / 1000) +
                                                           " s without progress";
    LOG_WARN(kLog, cfg_.rank, "the pause after step " << pause.step << " is given up: " << why);
    lock.unlock();
    end_pause("the pause was given up (" + why + ")");
}

// PAUSE after the pause's step to every live rank (the lock is released meanwhile); a rank that does not take it is
// a fault. Returns the ranks it went to.
std::set<int> Controller::send_pause(std::unique_lock<std::mutex>& lock) {
    const std::set<int> live = ranks_.live();
    FaultContext ctx;
    ctx.repair_step = repair_step_;
    ActionMsg msg = base_action(ActionKind::Pause, ctx, Strategy::None);
    msg.step = requests_.pausing.step;
    lock.unlock();
    ActionOutcome out = actions_.run_all(ActionKind::Pause, live, msg, true);
    lock.lock();
    fault_on_untaken_locked(out.failed, "PAUSE");
    return live;
}

// Waits until every live rank holds after the pause's step, one passed it or finished, or continue, a
// fault or shutdown came; bounded by the action timeout, renewed whenever a rank completes a step.
HoldVerdict Controller::await_hold(std::unique_lock<std::mutex>& lock) {
    auto progress = [&] {
        int64_t sum = 0;
        for (const auto& [rank, r] : pause_sightings_locked()) sum += r.step;
        return sum;
    };
    int64_t seen = progress();
    auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.action_timeout_ms);
    while (true) {
        HoldVerdict v = judge_hold(pause_sightings_locked(), requests_.pausing.step);
        if (v.kind != HoldVerdict::Waiting || stopping_ || intake_.has_pending() || requests_.resume) return v;
        if (int64_t now = progress(); now != seen) {
            seen = now;
            deadline = Clock::now() + std::chrono::milliseconds(cfg_.action_timeout_ms);
        }
        if (Clock::now() >= deadline) return v;
        cv_.wait_for(lock, kTick);
        // The job trains meanwhile and the state machine's loop does not tick: a rank that dies or hangs before
        // it holds is a fault now, which ends the wait, rather than after the whole action timeout.
        observe_goodput_locked();
        detect_dead_locked();
        judge_liveness_locked();
    }
}

// A rank that did not take a PAUSE or CONTINUE is a fault. One that died meanwhile has its fault already, a node
// fault declared with its death: an "unknown" one on top would outrank it and hide that the rank needs a new
// process (a node lost during a pause was once not replaced, and the job ended waiting for it).
void Controller::fault_on_untaken_locked(const std::set<int>& failed, const char* action) {
    for (int rank : failed) {
        if (!ranks_[rank].dead) add_fault_locked(rank, FaultKind::Unknown, std::string("did not take the ") + action);
    }
}

void Controller::end_pause(const std::string& why) {
    std::set<int> live;
    FaultContext ctx;
    {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.resume = false;
        requests_.pausing.asked_for = false;
        requests_.pausing.until.reset();
        live = ranks_.live();
        ctx.repair_step = repair_step_;
    }
    ActionOutcome out = actions_.run_all(ActionKind::Continue, live, base_action(ActionKind::Continue, ctx, Strategy::None), true);
    std::lock_guard<std::mutex> lock(mu_);
    if (!out.ok()) {
        fault_on_untaken_locked(out.failed, "CONTINUE");
        return;  // the fault's recovery releases the ranks that still hold
    }
    event_locked("continue", why);
    if (state_ != State::Pause) return;  // given up before every rank held: the job never left NORMAL
    std::ostringstream text;
    text << "training continues after step " << requests_.pausing.step << ": " << why << " (held "
         << seconds_since(requests_.pausing.held_since) << " s)";
    transition_locked(State::Normal, text.str());
}

}  // namespace mindio
