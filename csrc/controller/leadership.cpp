#include "controller/leadership.h"

#include "common/log.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

int64_t ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void Leadership::take_over(uint64_t term, int wait_ms) {
    term_ = term;
    took_over_ = true;
    took_over_at_ = Clock::now();
    settle_by_ = took_over_at_ + std::chrono::milliseconds(wait_ms);
}

bool Leadership::unsettled(bool all_back) {
    if (!settle_by_) return false;
    if (!all_back && Clock::now() < *settle_by_) return true;
    if (all_back) {
        LOG_INFO(kLog, log_rank_, "term " << term_ << ": every rank registered again " << ms_since(took_over_at_)
                                          << " ms after the takeover");
    }
    settle_by_.reset();
    return false;
}

std::string Leadership::take_takeover_dump() {
    std::string why = std::move(takeover_dump_);
    takeover_dump_.clear();
    return why;
}

bool Leadership::lease_allows_acting(const LeaseVerdict& lease, int grace_ms, const char* held,
                                     std::string* stand_down) {
    if (lease.held) {
        if (lease_lost_since_) {
            events_.note("lease_back", lease.why);
            LOG_INFO(kLog, log_rank_, "term " << term_ << ": lease back (" << lease.why << "): acting on the faults held");
            lease_lost_since_.reset();
        }
        return true;
    }
    if (!lease_lost_since_) {
        lease_lost_since_ = Clock::now();
        events_.note("lease_lost", lease.why);
        LOG_WARN(kLog, log_rank_, "term " << term_ << ": no lease: " << lease.why << ". A backup may lead them (a "
                                          "partition looks like their death from here): " << held << " for at most "
                                          << grace_ms << " ms");
        return false;
    }
    const int64_t held_ms = ms_since(*lease_lost_since_);
    if (held_ms >= grace_ms) *stand_down = "stood down: no lease for " + std::to_string(held_ms) + " ms (" + lease.why + ")";
    return false;
}

}  // namespace mindio
