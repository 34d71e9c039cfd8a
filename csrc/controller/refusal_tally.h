// Refusals of peers that did not prove the job's token, logged in aggregate: the first refusal of each
// kind in a period in full, then one summary line per period with the counts. A flood of bad frames
// costs a counter each, not a stored event and a log line each.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace mindio {

class RefusalTally {
public:
    using Clock = std::chrono::steady_clock;
    explicit RefusalTally(std::chrono::milliseconds period = std::chrono::seconds(10)) : period_(period) {}

    // Counts one refusal; true when it is the first of its kind in this period (the caller logs it in full).
    bool note(const std::string& kind);
    // The summary of the period when it is over and more were refused than were logged in full; empty
    // otherwise. Starts the next period when it returns one.
    std::string summary_due(Clock::time_point now);
    uint64_t total() const { return total_; }

private:
    static constexpr size_t kMaxKinds = 16;  // kinds beyond these are counted as "other"
    std::chrono::milliseconds period_;
    Clock::time_point period_start_ = Clock::now();
    std::map<std::string, uint64_t> counts_;  // this period's
    uint64_t unlogged_ = 0, total_ = 0;
};

}  // namespace mindio
