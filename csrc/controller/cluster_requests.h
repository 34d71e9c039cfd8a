// What the cluster manager asked of the controller (tft_notify_controller_*) and the controller has not
// carried out yet: a dump, a pause (and the pause being brought about or in force), a continue, a hot switch
// of some ranks, and its answer to a strategy offer. The state machine's loop takes them (controller.cpp).
// Under the controller's lock, as every unit of it.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>

#include "controller/pause.h"
#include "controller/planner.h"

namespace mindio {

struct Pausing {
    using Clock = std::chrono::steady_clock;
    int64_t step = -1;  // updates hold once a rank completed this step
    int hold_ms = kDefaultPauseHoldMs;
    bool asked_for = false;  // from the request until the pause ends or is given up
    Clock::time_point asked, held_since;
    std::optional<Clock::time_point> until;  // while every rank holds: when the pause ends by itself
};

struct ClusterRequests {
    bool dump = false;
    bool pause = false;       // the pause flow is due: PAUSE every rank
    bool resume = false;      // CONTINUE: a pause in force ends, or one being brought about is given up
    bool hot_switch = false;  // the hot switch's flow is due
    std::set<int> switching;  // the ranks of a hot switch asked for, until its flow begins or it is given up
    Pausing pausing;
    std::optional<Strategy> strategy;  // the answer to the strategies offered (consult_cluster)
};

}  // namespace mindio
