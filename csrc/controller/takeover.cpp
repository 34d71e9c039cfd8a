#include "controller/takeover.h"

#include "common/text.h"

namespace mindio {
namespace {

// The actions before which no rank's training state, groups or checkpoint have changed.
bool restartable(ActionKind kind) {
    return kind == ActionKind::Prelock || kind == ActionKind::Stop || kind == ActionKind::Clean;
}

std::string phases_text(const std::map<int, ActionKind>& interrupted) {
    std::map<std::string, std::set<int>> by_action;
    for (const auto& [rank, kind] : interrupted) by_action[action_name(kind)].insert(rank);
    std::string text;
    for (const auto& [name, ranks] : by_action) {
        text += (text.empty() ? "" : ", ") + std::string("ranks ") + list_text(ranks) + " at " + name;
    }
    return text;
}

}  // namespace

const char* takeover_resume_name(TakeoverResume r) {
    switch (r) {
        case TakeoverResume::Nothing: return "nothing";
        case TakeoverResume::Restart: return "restart";
        case TakeoverResume::Dump: return "dump";
    }
    return "?";
}

TakeoverPlan plan_takeover(const std::vector<TakeoverRank>& ranks, const std::set<int>& faulty) {
    TakeoverPlan plan;
    std::set<int> past_clean;
    for (size_t i = 0; i < ranks.size(); ++i) {
        const int rank = static_cast<int>(i);
        if (!ranks[i].registered) {
            plan.missing.insert(rank);
            continue;
        }
        if (ranks[i].recovery_action == 0) continue;
        auto kind = static_cast<ActionKind>(ranks[i].recovery_action);
        plan.interrupted[rank] = kind;
        if (!restartable(kind)) past_clean.insert(rank);
    }
    if (plan.interrupted.empty()) return plan;
    const std::string at = "a recovery was in progress at the takeover (" + phases_text(plan.interrupted) + ")";
    std::set<int> known = faulty;
    known.insert(plan.missing.begin(), plan.missing.end());
    if (!past_clean.empty()) {
        plan.resume = TakeoverResume::Dump;
        plan.why = at + ": ranks " + list_text(past_clean) +
                   " were past clean, where state may be half repaired; restarting is not safe: dump";
    } else if (known.empty()) {
        plan.resume = TakeoverResume::Dump;
        plan.why = at + ": no rank reported its fault again and none is missing, nothing to restart from: dump";
    } else {
        plan.resume = TakeoverResume::Restart;
        plan.why = at + ": no rank was past clean; the faults of ranks " + list_text(known) +
                   " are handled again from the start";
    }
    return plan;
}

}  // namespace mindio
