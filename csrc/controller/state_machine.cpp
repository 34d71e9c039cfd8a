#include "controller/state_machine.h"

#include <algorithm>

namespace mindio {
namespace {

using S = State;

// Every legal edge. Leaving this list is a bug in the controller, not a runtime condition.
const std::vector<std::pair<State, State>>& edges() {
    static const std::vector<std::pair<State, State>> table = {
        {S::Init, S::Normal},        {S::Init, S::Abnormal},    {S::Init, S::Exit},
        {S::Normal, S::Abnormal},    {S::Normal, S::Pause},     {S::Normal, S::Dump},      {S::Normal, S::Exit},
        {S::Pause, S::Normal},       {S::Pause, S::Abnormal},   {S::Pause, S::Dump},       {S::Pause, S::Exit},
        {S::Pause, S::EnvClear},  // a hot switch: every rank holds, then the hand-over
        {S::Abnormal, S::EnvClear},  {S::Abnormal, S::Dump},    {S::Abnormal, S::Exit},
        {S::EnvClear, S::Repair},    {S::EnvClear, S::Dump},    {S::EnvClear, S::Exit},
        {S::Repair, S::Normal},      {S::Repair, S::Dump},      {S::Repair, S::Exit},
        {S::Dump, S::Exit},
    };
    return table;
}

}  // namespace

const char* state_name(State s) {
    static const char* names[kNumStates] = {"INIT", "NORMAL", "PAUSE", "STEP_FINISH", "MIGRATION", "ABNORMAL",
                                            "ENV_CLEAR", "REPAIR", "DG_REPAIR", "DOWNGRADE", "UPGRADE", "DUMP",
                                            "EXIT", "FINAL"};
    auto i = static_cast<int>(s);
    return i < kNumStates ? names[i] : "UNKNOWN";
}

bool ends_the_job(State s) {
    return s == State::Dump || s == State::Exit || s == State::Final;
}

bool transition_allowed(State from, State to) {
    // Shutting the controller down is always allowed.
    if (to == State::Final) return from != State::Final;
    const auto& table = edges();
    return std::find(table.begin(), table.end(), std::make_pair(from, to)) != table.end();
}

std::vector<std::pair<State, State>> transition_table() {
    std::vector<std::pair<State, State>> all = edges();
    for (int i = 0; i < kNumStates; ++i) {
        if (static_cast<State>(i) != State::Final) all.emplace_back(static_cast<State>(i), State::Final);
    }
    return all;
}

const char* fault_kind_name(FaultKind k) {
    switch (k) {
        case FaultKind::Memory: return "memory";
        case FaultKind::Comm: return "communication";
        case FaultKind::Node: return "node";
        case FaultKind::Unknown: return "unknown";
    }
    return "?";
}

std::optional<FaultKind> fault_kind_of(ReportState state) {
    switch (state) {
        case ReportState::Uce:
        case ReportState::UceCorrupted: return FaultKind::Memory;
        // The reference's RETRY report (a precision error) is re-run like a communication error:
        // no state is lost, the step is recomputed.
        case ReportState::Retry:
        case ReportState::HcclFailed: return FaultKind::Comm;
        case ReportState::Unknown: return FaultKind::Unknown;
        default: return std::nullopt;
    }
}

Strategy decide(const Capabilities& caps, const DecisionInput& in) {
    const Strategy fallback = in.dump_possible ? Strategy::Dump : Strategy::Exit;
    if (in.kinds.empty() || in.during_repair) return fallback;
    if (in.kinds.count(FaultKind::Node)) {
        return caps.recover && in.repairable ? Strategy::Recover : fallback;
    }
    if (in.kinds.count(FaultKind::Unknown)) return fallback;
    // Retry repairs from replicas, or else reloads the last periodic checkpoint online.
    return caps.retry && (in.repairable || in.reload_possible) ? Strategy::Retry : fallback;
}

bool strategy_feasible(Strategy s, const Capabilities& caps, const DecisionInput& in) {
    switch (s) {
        case Strategy::None: return false;
        case Strategy::Retry:
            return caps.retry && (in.repairable || in.reload_possible) && !in.during_repair && !in.kinds.count(FaultKind::Node);
        case Strategy::Recover: return caps.recover && in.repairable && !in.during_repair;
        case Strategy::Dump: return in.dump_possible;
        case Strategy::Exit: return true;
        case Strategy::ScaleIn: return false;  // a fallback of process replacement, never asked for
        case Strategy::ScaleOut: return false;  // started by the controller when retired ranks return
        case Strategy::HotSwitch: return false;  // asked for on live ranks, never a fault's answer
    }
    return false;
}

Strategy combine_with_policy(const Capabilities& caps, const DecisionInput& in, Strategy builtin, Strategy asked) {
    if (static_cast<int>(asked) <= static_cast<int>(builtin)) return builtin;
    for (int s = static_cast<int>(asked); s <= static_cast<int>(Strategy::Exit); ++s) {
        if (strategy_feasible(static_cast<Strategy>(s), caps, in)) return static_cast<Strategy>(s);
    }
    return Strategy::Exit;
}

std::optional<Strategy> parse_strategy(const std::string& name) {
    for (int s = static_cast<int>(Strategy::None); s <= static_cast<int>(Strategy::Exit); ++s) {
        if (name == strategy_name(static_cast<Strategy>(s))) return static_cast<Strategy>(s);
    }
    return std::nullopt;
}

}  // namespace mindio
