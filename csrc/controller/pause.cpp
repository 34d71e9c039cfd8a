#include "controller/pause.h"

#include <algorithm>

namespace mindio {

int64_t pause_step(const std::map<int, PauseSighting>& live, int64_t asked, std::string* why) {
    int64_t highest = -1;
    int ahead = -1;
    for (const auto& [rank, r] : live) {
        if (r.step > highest) highest = r.step, ahead = rank;
    }
    if (asked < 0) return highest + 1;
    if (asked < highest) {
        *why = "rank " + std::to_string(ahead) + " already completed step " + std::to_string(highest) +
               ": a pause after step " + std::to_string(asked) + " cannot be kept";
        return -1;
    }
    return asked;
}

HoldVerdict judge_hold(const std::map<int, PauseSighting>& live, int64_t step) {
    HoldVerdict v;
    for (const auto& [rank, r] : live) {
        if (r.finished) return HoldVerdict{HoldVerdict::Ended, {}, rank, r.step};
        if (r.step > step) return HoldVerdict{HoldVerdict::Passed, {}, rank, r.step};
        if (!(r.holding && r.step == step)) v.behind.insert(rank);
    }
    if (v.behind.empty()) v.kind = HoldVerdict::Holding;
    return v;
}

}  // namespace mindio
