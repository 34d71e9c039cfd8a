// When a job scaled in by elastic training grows back (the scale-out): the ranks the scale-in retired
// return as restarted processes, one by one. Pure, so the unit tests walk it through the bindings.
//
// The rule: the job scales out only to its original size, once every retired rank has a returned
// process that is connected and reported ready; the survivors train on meanwhile. Returned processes
// that do not make the set complete within the wait (MINDIO_SCALE_OUT_WAIT_S, from the first return) are
// sent away, and the job goes on at its smaller size.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace mindio {

struct ReturnView {
    bool retired = false;
    bool joining = false;  // a restarted process registered for it
    bool ready = false;    // and reported ready (PREREPAIR_FINISH)
    bool connected = false;
};

enum class ScaleOutVerdict : uint8_t { Nothing = 0, Wait = 1, Start = 2, Abandon = 3 };
const char* scale_out_verdict_name(ScaleOutVerdict v);

struct ScaleOutJudgement {
    ScaleOutVerdict verdict = ScaleOutVerdict::Nothing;
    std::set<int> retired, returned, ready;  // returned: joining and connected
    std::string why;                         // for Wait and Abandon
};

// waited_ms: since the first return (the caller's clock); wait_ms: MINDIO_SCALE_OUT_WAIT_S.
ScaleOutJudgement judge_scale_out(const std::vector<ReturnView>& ranks, int64_t waited_ms, int64_t wait_ms);

}  // namespace mindio
