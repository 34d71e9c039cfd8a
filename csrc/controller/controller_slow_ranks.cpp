// The slow-rank signal (slow_ranks.h) as Controller runs it: every tick it judges the windows the live
// ranks completed, and says what changed once, as an event, a log line and the rank's flag `slow`. A
// warning only: nothing stops or moves a slow rank yet (issue 35's hot switch will be the action).
#include "common/log.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

void Controller::judge_slow_ranks_locked() {
    if (state_ != State::Normal) return;  // windows that span a recovery or a pause are judged once it ended
    for (const SlowNews& n : slow_.judge(ranks_.live())) {
        event_locked(n.slow ? "slow_rank" : "slow_rank_well", "rank " + std::to_string(n.rank) + ": " + n.why);
        if (n.slow) {
            LOG_WARN(kLog, cfg_.rank, "rank " << n.rank << " is slow: " << n.why);
        } else {
            LOG_INFO(kLog, cfg_.rank, "rank " << n.rank << " is no longer slow: " << n.why);
        }
    }
}

}  // namespace mindio
