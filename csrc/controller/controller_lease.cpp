// The leader's lease (lease.h): members of Controller, under its lock, kept out of controller.cpp.
#include <algorithm>

#include "common/log.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";
// How long a processor takes to notice a silent controller at the least (its I/O timeout): the ranks on
// the other side of a partition need that long before a backup can hear from them.
constexpr int kDetectionFloorMs = 5000;
constexpr auto kLeaseTick = std::chrono::milliseconds(20);

}  // namespace

std::vector<LeaseRank> Controller::lease_ranks_locked() const {
    std::vector<LeaseRank> view;
    view.reserve(ranks_.size());
    for (const RankEntry& r : ranks_) {
        // A silent rank counts until the hang rule names it (declared dead), or until it lets an action's
        // deadline pass in that silence (a partition that began during a recovery): a process stalled for
        // seconds on a busy host must not cost the lease.
        view.push_back({r.registered && r.connected && !r.dead && !r.unanswered,
                        r.end_reported || r.finished || r.left || r.retired});
    }
    return view;
}

// The other side's ranks notice the silence within max(5 s, 3 heartbeat periods) (the processor's user
// timeout); a held fault waits that long for the lease to come back (a launcher's report, a silence
// ending) before this controller gives way.
int Controller::lease_grace_ms_locked() const {
    uint32_t period = 0;
    for (const RankEntry& r : ranks_) period = std::max(period, r.heartbeat_ms);
    return std::max(kDetectionFloorMs, 3 * static_cast<int>(period));
}

bool Controller::lease_allows_acting_locked(const char* held) {
    if (!leadership_.lease_applies() || state_ == State::Init) return true;
    std::string stand_down;
    if (leadership_.lease_allows_acting(judge_lease(lease_ranks_locked()), lease_grace_ms_locked(), held, &stand_down)) {
        return true;
    }
    if (stand_down.empty()) return false;
    event_locked("stood_down", stand_down);
    LOG_ERROR(kLog, cfg_.rank, "this controller (term " << leadership_.term() << ") " << stand_down << ": it no longer "
                                   "acts and closes its connections; its ranks try the next controller of their list");
    stop_leading_locked(stand_down);
    return false;
}

// A partition that begins during a recovery shows as ranks that let an action pass in silence. Before each
// step of a flow, and before its fallback, the lease is judged as before a fault: held, the flow goes on;
// lost, its next step waits as a held fault does, and if the lease does not come back this controller
// stands down and the flow ends there, with no dump and no exit: the side that leads the majority acts alone.
bool Controller::lease_holds() {
    std::unique_lock<std::mutex> lock(mu_);
    while (leadership_.may_lead() && !stopping_) {
        if (lease_allows_acting_locked("the recovery under way is held before its next action")) return true;
        cv_.wait_for(lock, kLeaseTick);
    }
    return false;
}

}  // namespace mindio
