#include "controller/goodput.h"

#include <algorithm>

namespace mindio {
namespace {

const char* const kUses[] = {"start_up", "productive", "saving", "stalled", "paused", "recovering", "recomputed"};

bool recovering(State s) { return s != State::Init && s != State::Normal && s != State::Pause && s != State::Final; }

}  // namespace

GoodputLedger::GoodputLedger(Clock::time_point start) : last_(start) {
    for (const char* use : kUses) uses_[use] = 0.0;
}

void GoodputLedger::add(const std::string& use, double seconds) {
    uses_[use] += seconds;
    if (use == "recomputed" && !recoveries_.empty()) recoveries_.back().recomputed_s += seconds;
}

// The interval since the last observation, where the job was then.
void GoodputLedger::account(Clock::time_point now) {
    const double dt = std::chrono::duration<double>(now - last_).count();
    last_ = std::max(last_, now);
    if (dt <= 0 || finished_) return;
    if (state_ == State::Normal && activity_ == Activity::StartingUp) {
        add("start_up", dt);
    } else if (state_ == State::Normal) {
        open_s_ += dt;
        if (activity_ == Activity::Saving) open_saving_s_ += dt;
    } else if (state_ == State::Pause) {
        add("paused", dt);
    } else if (recovering(state_)) {
        add("recovering", dt);
        recoveries_.back().phases[state_name(state_)] += dt;
    } else {
        add("start_up", dt);  // INIT
    }
}

double GoodputLedger::usual_step_s() const {
    if (recent_steps_.size() < 3) return 0.0;
    std::vector<double> sorted(recent_steps_.begin(), recent_steps_.end());
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    return sorted[sorted.size() / 2];
}

// Closes the open interval: its saving is put in "saving"; the rest, its work, is returned for the caller to place.
double GoodputLedger::take_open() {
    add("saving", open_saving_s_);
    const double work = open_s_ - open_saving_s_;
    open_s_ = open_saving_s_ = 0.0;
    return work;
}

// `count` steps completed in the open interval, the last of them step_: put its time where it belongs.
void GoodputLedger::steps_completed(int64_t count) {
    const double work = take_open();
    if (step_ <= high_water_) return add("recomputed", work);
    const double per_step = work / static_cast<double>(count), usual = usual_step_s();
    const double stalled = usual > 0 && per_step > kStallFactor * usual ? (per_step - usual) * count : 0.0;
    add("stalled", stalled);
    add("productive", work - stalled);
    recent_steps_.push_back(per_step - stalled / count);
    while (recent_steps_.size() > kUsualWindow) recent_steps_.pop_front();
}

void GoodputLedger::observe(Clock::time_point now, State state, int64_t step, Activity activity) {
    if (finished_) return;
    account(now);
    if (step > step_) {
        const int64_t count = step_ < 0 ? 1 : step - step_;
        step_ = step;
        steps_completed(count);
        high_water_ = std::max(high_water_, step);
    } else if (step < step_) {
        step_ = step;  // rolled back: the steps up to high_water_ are done again
    }
    if (recovering(state) && !recovering(state_)) {
        recoveries_.push_back(RecoveryTime{static_cast<int>(recoveries_.size()) + 1, {}, 0.0});
        add("recomputed", take_open());  // the step a fault interrupted is done again
    }
    state_ = state;
    activity_ = activity;
}

void GoodputLedger::finish(Clock::time_point now) {
    if (finished_) return;
    account(now);
    add("productive", take_open());  // after the last step: the end of the train loop
    finished_ = true;
}

GoodputTotals GoodputLedger::totals(Clock::time_point now) const {
    GoodputLedger now_ledger = *this;
    now_ledger.account(now);
    now_ledger.add("productive", now_ledger.take_open());  // the step in progress, so far
    GoodputTotals t;
    t.uses = now_ledger.uses_;
    for (const auto& [use, s] : t.uses) t.wall_s += s;
    t.recoveries = now_ledger.recoveries_;
    return t;
}

}  // namespace mindio
