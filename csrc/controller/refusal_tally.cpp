#include "controller/refusal_tally.h"

#include <sstream>

namespace mindio {

bool RefusalTally::note(const std::string& kind) {
    ++total_;
    const std::string& key = counts_.size() < kMaxKinds || counts_.count(kind) ? kind : "other";
    bool first = counts_[key]++ == 0;
    if (!first) ++unlogged_;
    return first;
}

std::string RefusalTally::summary_due(Clock::time_point now) {
    if (now - period_start_ < period_) return "";
    std::string line;
    if (unlogged_ > 0) {
        uint64_t all = 0;
        std::ostringstream parts;
        for (const auto& [kind, n] : counts_) {
            parts << (all ? ", " : "") << kind << " " << n;
            all += n;
        }
        auto s = std::chrono::duration_cast<std::chrono::seconds>(now - period_start_).count();
        line = "refused " + std::to_string(all) + " unauthenticated frames or connections in the last " +
               std::to_string(s) + " s (" + parts.str() + "; " + std::to_string(total_) + " since the start)";
    }
    counts_.clear();
    unlogged_ = 0;
    period_start_ = now;
    return line;
}

}  // namespace mindio
