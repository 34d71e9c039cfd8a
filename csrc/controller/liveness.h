// Which ranks are silent and which hang, from what the controller last heard of each. Pure, so the
// unit tests can walk synthetic heartbeat and progress timelines through the bindings.
//
// Stall is not death: a rank whose connection is open but that stays silent for heartbeat_misses
// periods is only a suspect (a stopped or CPU-starved process is back seconds later). Death is a closed
// connection, judged elsewhere. A hang is judged by the hang rule: some rank's timed section (train
// step, save, evaluation) has run past the limit that rank derived from its own history, or a rank has
// been silent past silence_limit_ms. The rule then names the ranks that did not progress: the silent
// ones if any, else the ranks furthest behind (last completed step, then where they are between two
// steps, then work done in the section); the others are waiting on them.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "protocol/messages.h"

namespace mindio {

struct RankSighting {
    bool watched = false;       // registered, connected, and neither dead, gone nor joining
    int64_t silent_ms = 0;      // since the rank's last frame
    int64_t heartbeat_ms = 2000;
    int64_t step = -1;          // last completed step
    Section section = Section::None;
    int64_t section_ms = 0;     // the section's age when the last frame was sent
    int64_t limit_ms = 0;       // the section's limit; 0: none
    uint64_t section_progress = 0;  // work done since the section began
};

struct LivenessRules {
    double heartbeat_misses = 3.0;
    int64_t silence_limit_ms = 60000;  // silent this long is a hang whatever the rank was doing
};

struct LivenessVerdict {
    std::set<int> suspects;
    std::set<int> hung;
    std::string why;  // the rule that fired, with its numbers; empty when nothing hangs
};

LivenessVerdict judge_liveness(const std::vector<RankSighting>& ranks, const LivenessRules& rules);

}  // namespace mindio
