// The goodput ledger: where the job's wall time went, as the controller saw it. Every moment from the
// controller's start to the job's end is put in exactly one use, so the uses add up to the wall time:
//
//   start_up     before training: INIT, and while a rank is in its start-up section (model build, data)
//   productive   steps completed for the first time, at their usual pace
//   saving       while a rank saved a checkpoint or evaluated (the job's own work, not a step)
//   stalled      what a step took beyond stall_factor x the usual step time (a hiccup no rule called a fault)
//   paused       held by a pause (pause.h)
//   recovering   in a recovery (any state but INIT, NORMAL and PAUSE), by phase: the controller's state
//   recomputed   steps done again after a recovery rolled back, and the partial step a fault interrupted
//
// Each recovery gets its own record: its phases and what it made the job compute again. Pure: the
// controller observes its state and the highest step any live rank completed, under its lock; the unit
// tests walk synthetic timelines through the bindings.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "controller/state_machine.h"

namespace mindio {

struct RecoveryTime {
    int number = 0;                        // 1 for the job's first recovery
    std::map<std::string, double> phases;  // seconds per controller state
    double recomputed_s = 0.0;             // the interrupted partial step and the steps done again after it
};

struct GoodputTotals {
    double wall_s = 0.0;
    std::map<std::string, double> uses;  // seconds per use (every use named, 0 when unused)
    std::vector<RecoveryTime> recoveries;
};

class GoodputLedger {
public:
    using Clock = std::chrono::steady_clock;
    static constexpr double kStallFactor = 3.0;  // a step this many times its usual time: the rest is a stall
    static constexpr size_t kUsualWindow = 16;   // the usual step time is the median of this many steps

    explicit GoodputLedger(Clock::time_point start);
    // What the live ranks do, as the controller sees it from their sections.
    enum class Activity { Training, Saving, StartingUp };  // Saving: a checkpoint save or an evaluation

    // What the controller sees at `now`: its state, the highest step a live rank completed (-1: none) and
    // what the ranks do. Time before `now` is put where the previous observation said the job was.
    void observe(Clock::time_point now, State state, int64_t step, Activity activity);
    // The job completed (a rank finished training): time after `now` is not accounted.
    void finish(Clock::time_point now);
    GoodputTotals totals(Clock::time_point now) const;

private:
    void account(Clock::time_point now);
    double take_open();
    void steps_completed(int64_t count);
    void add(const std::string& use, double seconds);
    double usual_step_s() const;

    Clock::time_point last_;
    State state_ = State::Init;
    Activity activity_ = Activity::StartingUp;
    bool finished_ = false;
    int64_t step_ = -1, high_water_ = -1;  // -1: none yet
    double open_s_ = 0.0;                                  // time of the step in progress (NORMAL)
    double open_saving_s_ = 0.0;                           // of it, while a rank saved or evaluated
    std::deque<double> recent_steps_;                       // the last step times, for the usual one
    std::map<std::string, double> uses_;
    std::vector<RecoveryTime> recoveries_;
};

}  // namespace mindio
