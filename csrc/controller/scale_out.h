// When a job scaled in by elastic training grows back (the scale-out): the ranks the scale-in retired
// return as restarted processes, one by one. Pure, so the unit tests walk it through the bindings.
//
// The rule: the job scales out to its original size once every retired rank has a returned process that
// is connected and reported ready; the survivors train on meanwhile. When the set is not complete within
// the wait (MINDIO_SCALE_OUT_WAIT_S, from the first return), the job scales out part of the way with the
// ready ones (partial): the ranks still absent are named to every rank, which plan the size without their
// data-parallel slices (core/layout/scale_out_plan); a ready rank whose slice has an absent rank leaves
// again at REBUILD_GROUP, as a scale-in's leaver does. Returned processes not ready by then are sent away.
// With none ready, every returned one is sent away and the job goes on at its smaller size.
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
    bool partial = false;                    // Start with only the ready ranks; `absent` stay retired
    std::set<int> absent;                    // retired and not ready (partial)
    std::set<int> sent_away;                 // returned and not ready (partial and Abandon)
    std::string why;                         // for Wait, Abandon and a partial Start
};

// waited_ms: since the first return (the caller's clock); wait_ms: MINDIO_SCALE_OUT_WAIT_S.
ScaleOutJudgement judge_scale_out(const std::vector<ReturnView>& ranks, int64_t waited_ms, int64_t wait_ms);

}  // namespace mindio
