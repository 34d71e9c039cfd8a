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
    if (!not_leading_.empty()) return "this controller does not lead the job (" + not_leading_ + ")";
    if (pause_.asked_for) return "a pause is already asked for";
    if (state_ != State::Normal || flow_active_ || !pending_faults_.empty()) {
        return std::string("the job is in state ") + state_name(state_) + ": only a job training normally is paused";
    }
    std::string why;
    const int64_t step = pause_step(pause_sightings_locked(), after_step, &why);
    if (step < 0) return why;
    pause_ = Pausing{step, hold_ms, true, Clock::now(), {}, std::nullopt};
    pause_requested_ = true;
    continue_requested_ = false;
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
    if (state_ != State::Pause || !pause_.until || Clock::now() < *pause_.until || continue_requested_) return;
    LOG_INFO(kLog, cfg_.rank, "the pause after step " << pause_.step << " reached its hold limit of "
                                  << pause_.hold_ms / 1000.0 << " s");
    continue_requested_ = true;
}

void Controller::pause_flow() {
    std::unique_lock<std::mutex> lock(mu_);
    flow_active_ = true;
    pause_requested_ = false;
    if (state_ == State::Pause) {
        const bool limit = pause_.until && Clock::now() >= *pause_.until;
        lock.unlock();
        return end_pause(limit ? "its hold limit was reached" : "continue was asked for");
    }
    const std::set<int> live = send_pause(lock);
    HoldVerdict v = await_hold(lock);
    if (stopping_ || !pending_faults_.empty()) {
        LOG_WARN(kLog, cfg_.rank, "the pause after step " << pause_.step << " is given up: a fault came first");
        pause_.asked_for = false;
        return;  // the fault is handled next; its recovery's first action ends the pause on every rank
    }
    if (v.kind == HoldVerdict::Holding) {
        // PAUSE only now: until every rank holds, the job trains (the ledger and the hang rule see it so)
        std::ostringstream text;
        text << "training paused after step " << pause_.step << ": all " << live.size() << " ranks hold before "
             << "their next update, " << seconds_since(pause_.asked) << " s after the request; it continues when "
             << "asked, or after " << pause_.hold_ms / 1000.0 << " s";
        transition_locked(State::Pause, text.str());
        pause_.held_since = Clock::now();
        pause_.until = pause_.held_since + std::chrono::milliseconds(pause_.hold_ms);
        event_locked("paused", "after step " + std::to_string(pause_.step));
        return;
    }
    std::string why = continue_requested_ ? "continue was asked for before every rank held"
                      : v.kind == HoldVerdict::Passed ? "rank " + std::to_string(v.rank) + " completed step " +
                                                            std::to_string(v.rank_step) + " before the pause reached it"
                      : v.kind == HoldVerdict::Ended ? "rank " + std::to_string(v.rank) + " finished training"
                                                     : "ranks " + list_text(v.behind) + " did not hold within " +
                                                           std::to_string(cfg_.action_timeout_ms / 1000) +
                                                           " s without progress";
    LOG_WARN(kLog, cfg_.rank, "the pause after step " << pause_.step << " is given up: " << why);
    lock.unlock();
    end_pause("the pause was given up (" + why + ")");
}

// PAUSE after pause_.step to every live rank (the lock is released meanwhile); a rank that does not take it is
// a fault. Returns the ranks it went to.
std::set<int> Controller::send_pause(std::unique_lock<std::mutex>& lock) {
    const std::set<int> live = ranks_.live();
    FaultContext ctx;
    ctx.repair_step = repair_step_;
    ActionMsg msg = base_action(ActionKind::Pause, ctx, Strategy::None);
    msg.step = pause_.step;
    lock.unlock();
    ActionOutcome out = actions_.run_all(ActionKind::Pause, live, msg, true);
    lock.lock();
    for (int rank : out.failed) add_fault_locked(rank, FaultKind::Unknown, "did not take the PAUSE");
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
        HoldVerdict v = judge_hold(pause_sightings_locked(), pause_.step);
        if (v.kind != HoldVerdict::Waiting || stopping_ || !pending_faults_.empty() || continue_requested_) return v;
        if (int64_t now = progress(); now != seen) {
            seen = now;
            deadline = Clock::now() + std::chrono::milliseconds(cfg_.action_timeout_ms);
        }
        if (Clock::now() >= deadline) return v;
        cv_.wait_for(lock, kTick);
        observe_goodput_locked();  // the job trains meanwhile: the state machine's loop does not tick
    }
}

void Controller::end_pause(const std::string& why) {
    std::set<int> live;
    FaultContext ctx;
    {
        std::lock_guard<std::mutex> lock(mu_);
        continue_requested_ = false;
        pause_.asked_for = false;
        pause_.until.reset();
        live = ranks_.live();
        ctx.repair_step = repair_step_;
    }
    ActionOutcome out = actions_.run_all(ActionKind::Continue, live, base_action(ActionKind::Continue, ctx, Strategy::None), true);
    std::lock_guard<std::mutex> lock(mu_);
    if (!out.ok()) {
        for (int rank : out.failed) add_fault_locked(rank, FaultKind::Unknown, "did not take the CONTINUE");
        return;  // the fault's recovery releases the ranks that still hold
    }
    event_locked("continue", why);
    if (state_ != State::Pause) return;  // given up before every rank held: the job never left NORMAL
    std::ostringstream text;
    text << "training continues after step " << pause_.step << ": " << why << " (held "
         << seconds_since(pause_.held_since) << " s)";
    transition_locked(State::Normal, text.str());
}

}  // namespace mindio
