// Pause and continue at a step boundary, as the controller decides them from the ranks' reports. Pure:
// the controller's glue (flow, waits, logs) is controller_pause.cpp; the unit tests reach these through
// the bindings.
//
// A pause is a step after which no rank starts its next optimizer update until CONTINUE: each rank
// holds right before that update, after the step's gradient collectives, so no rank waits inside a
// collective for a held peer and nothing is rolled back. The controller knows the pause is in force
// when every live rank reports it holds at that step.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace mindio {

constexpr int kDefaultPauseHoldMs = 600 * 1000;    // a pause ends by itself after this unless told otherwise
constexpr int kMaxPauseHoldMs = 24 * 3600 * 1000;  // the longest a pause may be asked to hold

// What a pause reads of a live rank.
struct PauseSighting {
    int64_t step = -1;      // its last completed step
    bool holding = false;   // it reported that it holds (run status Paused)
    bool finished = false;  // its training is over
};

// The step a pause holds after. `asked` >= 0 is kept when no live rank completed a later step (else
// *why says which did). By default (asked < 0) the step after the highest one completed: a rank may be
// inside the update of the step after the highest reported one, but none can be past the next boundary.
int64_t pause_step(const std::map<int, PauseSighting>& live, int64_t asked, std::string* why);

// Where the live ranks stand with respect to a pause after `step`.
struct HoldVerdict {
    enum Kind { Waiting, Holding, Passed, Ended } kind = Waiting;
    std::set<int> behind;  // Waiting: the ranks not holding yet
    int rank = -1;         // Passed: a rank that completed a later step; Ended: a rank whose training is over
    int64_t rank_step = -1;
};
HoldVerdict judge_hold(const std::map<int, PauseSighting>& live, int64_t step);

}  // namespace mindio
