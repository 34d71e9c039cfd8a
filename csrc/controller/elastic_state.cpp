#include "controller/elastic_state.h"

#include "common/log.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

std::set<int> ElasticState::end_relayout(const std::set<int>& targets) {
    relayout_ = false;
    std::set<int> silent;
    for (int r : targets) {
        if (!reporters_.count(r)) silent.insert(r);
    }
    return silent;
}

ScaleOutJudgement ElasticState::judge_returns(const std::vector<ReturnView>& ranks, Clock::time_point now) {
    if (!first_return_) first_return_ = now;
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - *first_return_).count();
    ScaleOutJudgement j = judge_scale_out(ranks, waited, scale_out_wait_ms_);
    if (j.verdict != ScaleOutVerdict::Wait) {
        first_return_.reset();
        wait_logged_.clear();
    } else if (j.why != wait_logged_) {
        wait_logged_ = j.why;
        events_.note("scale_out_wait", j.why);
        LOG_INFO(kLog, log_rank_, "elastic training: " << j.why << " (up to " << scale_out_wait_ms_
                                                       << " ms, MINDIO_SCALE_OUT_WAIT_S)");
    }
    return j;
}

}  // namespace mindio
