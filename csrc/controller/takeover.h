// What a backup controller that took over must settle before it leads the job: the ranks that never
// registered with it (they died with the old controller's node), and a recovery the old controller
// left unfinished. Pure, so the unit tests walk it through the bindings.
//
// The rule for an unfinished recovery (the ranks say at registration the last action of it they ran):
// - no rank ran anything past CLEAN (PRELOCK, STOP, CLEAN change no rank's training state): the fault
//   is handled again from the start, as a fresh one, when a fault is known (a rank reported it again,
//   or a rank is missing); with no fault known there is nothing to restart from, and the job dumps;
// - some rank ran REBUILD_GROUP, REPAIR, ROLLBACK, SAVE_CKPT or RENAME: ranks' state, groups or a
//   checkpoint may be half changed, which no restart can tell apart; the job dumps (the savers are the
//   healthy ranks, whose state at the repair step is intact).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "protocol/messages.h"

namespace mindio {

struct TakeoverRank {
    bool registered = false;
    uint16_t recovery_action = 0;  // RegisterMsg::recovery_action: 0, none in progress
};

enum class TakeoverResume : uint8_t { Nothing = 0, Restart = 1, Dump = 2 };
const char* takeover_resume_name(TakeoverResume r);

struct TakeoverPlan {
    std::set<int> missing;                  // not registered: declared dead
    std::map<int, ActionKind> interrupted;  // inside the old controller's recovery, at this action
    TakeoverResume resume = TakeoverResume::Nothing;
    std::string why;  // the choice, as logged (empty when no recovery was in progress)
};

// `faulty`: the ranks with a fault known to the new controller (reported to it, or lost since).
TakeoverPlan plan_takeover(const std::vector<TakeoverRank>& ranks, const std::set<int>& faulty);

}  // namespace mindio
