// Elastic training's state in the controller: a relayout under way (a flow's REBUILD_GROUP that changes the
// data-parallel size, and the ranks that reported their replica layout at the new size since it began), and
// the wait for a scale-out (since the first return of a retired rank, and what that wait last logged). The
// rule for the scale-out is scale_out.h's. Under the controller's lock, as every unit of it.
#pragma once
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "controller/event_log.h"
#include "controller/scale_out.h"

namespace mindio {

class ElasticState {
public:
    using Clock = std::chrono::steady_clock;
    ElasticState(EventLog& events, int log_rank, int scale_out_wait_ms)
        : events_(events), log_rank_(log_rank), scale_out_wait_ms_(scale_out_wait_ms) {}

    // The controller forgot the layout of the old size; each rank's report at the new size is noted.
    void begin_relayout() { relayout_ = true, reporters_.clear(); }
    bool relayout() const { return relayout_; }
    void note_report(int rank) {
        if (relayout_) reporters_.insert(rank);
    }
    // The ranks of `targets` that reported nothing; the relayout is over.
    std::set<int> end_relayout(const std::set<int>& targets);
    void abort_relayout() { relayout_ = false; }  // a flow aborted in its REBUILD_GROUP

    // The retired ranks' returns judged now (scale_out.h); a new reason to wait is logged once.
    ScaleOutJudgement judge_returns(const std::vector<ReturnView>& ranks, Clock::time_point now);

private:
    EventLog& events_;
    const int log_rank_;
    const int scale_out_wait_ms_;
    bool relayout_ = false;
    std::set<int> reporters_;
    std::optional<Clock::time_point> first_return_;  // a retired rank returned, the scale-out not yet due
    std::string wait_logged_;                         // what the wait for the scale-out last logged
};

}  // namespace mindio
