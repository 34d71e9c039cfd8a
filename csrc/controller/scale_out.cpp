#include "controller/scale_out.h"

#include "common/text.h"

namespace mindio {

const char* scale_out_verdict_name(ScaleOutVerdict v) {
    switch (v) {
        case ScaleOutVerdict::Nothing: return "nothing";
        case ScaleOutVerdict::Wait: return "wait";
        case ScaleOutVerdict::Start: return "start";
        case ScaleOutVerdict::Abandon: return "abandon";
    }
    return "?";
}

ScaleOutJudgement judge_scale_out(const std::vector<ReturnView>& ranks, int64_t waited_ms, int64_t wait_ms) {
    ScaleOutJudgement j;
    for (size_t i = 0; i < ranks.size(); ++i) {
        const ReturnView& r = ranks[i];
        if (!r.retired) continue;
        const int rank = static_cast<int>(i);
        j.retired.insert(rank);
        if (!r.joining || !r.connected) continue;
        j.returned.insert(rank);
        if (r.ready) j.ready.insert(rank);
    }
    if (j.returned.empty()) return j;
    if (j.ready == j.retired) {
        j.verdict = ScaleOutVerdict::Start;
        return j;
    }
    std::set<int> absent, unready;
    for (int rank : j.retired) {
        if (!j.returned.count(rank)) absent.insert(rank);
        else if (!j.ready.count(rank)) unready.insert(rank);
    }
    std::string missing;
    if (!absent.empty()) missing += " ranks " + list_text(absent) + " have not returned;";
    if (!unready.empty()) missing += " ranks " + list_text(unready) + " returned but are not ready;";
    if (waited_ms < wait_ms) {
        j.verdict = ScaleOutVerdict::Wait;
        j.why = "the scale-out waits for every retired rank:" + missing.substr(0, missing.size() - 1);
        return j;
    }
    const std::string waited = "after " + std::to_string(waited_ms) + " ms (MINDIO_SCALE_OUT_WAIT_S " +
                               std::to_string(wait_ms) + " ms)" + missing.substr(0, missing.size() - 1);
    j.sent_away = unready;
    if (j.ready.empty()) {
        j.verdict = ScaleOutVerdict::Abandon;
        j.sent_away = j.returned;
        j.why = "no scale-out: " + waited + "; returned ranks " + list_text(j.returned) +
                " are sent away and the job goes on at its smaller size";
        return j;
    }
    j.verdict = ScaleOutVerdict::Start;
    j.partial = true;
    for (int rank : j.retired) {
        if (!j.ready.count(rank)) j.absent.insert(rank);
    }
    j.why = "partial scale-out: " + waited + "; the job grows with the ready ranks " + list_text(j.ready) +
            " where their data-parallel slices are whole, without ranks " + list_text(j.absent) +
            (unready.empty() ? "" : "; ranks " + list_text(unready) + " are sent away");
    return j;
}

}  // namespace mindio
