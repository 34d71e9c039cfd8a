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

}  // namespace

std::vector<LeaseRank> Controller::lease_ranks_locked() const {
    std::vector<LeaseRank> view;
    view.reserve(ranks_.size());
    for (const RankEntry& r : ranks_) {
        // A silent rank counts until the hang rule names it (declared dead): a process stalled for seconds on
        // a busy host must not cost the lease, and a partition's silence reaches the leader's faults only
        // through that rule anyway.
        view.push_back({r.registered && r.connected && !r.dead, r.end_reported || r.finished || r.left || r.retired});
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

bool Controller::lease_allows_acting_locked() {
    if (!backups_listed_ || state_ == State::Init) return true;
    const LeaseVerdict lease = judge_lease(lease_ranks_locked());
    const auto now = Clock::now();
    if (lease.held) {
        if (lease_lost_since_) {
            event_locked("lease_back", lease.why);
            LOG_INFO(kLog, cfg_.rank, "term " << term_ << ": lease back (" << lease.why << "): acting on the faults held");
            lease_lost_since_.reset();
        }
        return true;
    }
    const int grace_ms = lease_grace_ms_locked();
    if (!lease_lost_since_) {
        lease_lost_since_ = now;
        event_locked("lease_lost", lease.why);
        LOG_WARN(kLog, cfg_.rank, "term " << term_ << ": no lease: " << lease.why << ". A backup may lead them (a "
                                          "partition looks like their death from here): their faults are held, not acted "
                                          "on, for at most " << grace_ms << " ms");
        return false;
    }
    auto held_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - *lease_lost_since_).count();
    if (held_ms < grace_ms) return false;
    const std::string why = "stood down: no lease for " + std::to_string(held_ms) + " ms (" + lease.why + ")";
    event_locked("stood_down", why);
    LOG_ERROR(kLog, cfg_.rank, "this controller (term " << term_ << ") " << why << ": it no longer acts and closes "
                                   "its connections; its ranks try the next controller of their list");
    stop_leading_locked(why);
    return false;
}

}  // namespace mindio
