#include "controller/liveness.h"

#include <algorithm>
#include <sstream>
#include <tuple>

namespace mindio {
namespace {

// Where a rank is within one completed step: between sections, evaluating, saving, or in the next
// train step (Megatron's loop runs them in this order after a step completes).
int phase_of(Section s) {
    switch (s) {
        case Section::Eval: return 1;
        case Section::Save: return 2;
        case Section::Step: return 3;
        default: return 0;
    }
}

std::tuple<int64_t, int, uint64_t> position(const RankSighting& r) {
    return {r.step, phase_of(r.section), r.section_progress};
}

int64_t section_age_ms(const RankSighting& r) { return r.section == Section::None ? 0 : r.section_ms + r.silent_ms; }

bool over_limit(const RankSighting& r) { return r.section != Section::None && r.limit_ms > 0 && section_age_ms(r) > r.limit_ms; }

std::string ranks_text(const std::set<int>& ranks) {
    std::ostringstream os;
    os << "[";
    for (auto it = ranks.begin(); it != ranks.end(); ++it) os << (it == ranks.begin() ? "" : ",") << *it;
    os << "]";
    return os.str();
}

}  // namespace

LivenessVerdict judge_liveness(const std::vector<RankSighting>& ranks, const LivenessRules& rules) {
    LivenessVerdict v;
    std::set<int> over, too_silent;
    int first_over = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
        const RankSighting& r = ranks[i];
        if (!r.watched) continue;
        int rank = static_cast<int>(i);
        bool missed = r.silent_ms > static_cast<int64_t>(rules.heartbeat_misses * static_cast<double>(r.heartbeat_ms));
        // A silence limit below heartbeat_misses periods still makes the silent rank the suspect.
        if (r.silent_ms > rules.silence_limit_ms) too_silent.insert(rank), missed = true;
        if (missed) v.suspects.insert(rank);
        if (over_limit(r)) {
            over.insert(rank);
            if (first_over < 0) first_over = rank;
        }
    }
    if (over.empty() && too_silent.empty()) return v;
    std::ostringstream why;
    if (!over.empty()) {
        const RankSighting& r = ranks[first_over];
        why << "rank " << first_over << "'s " << section_name(r.section) << " has run " << section_age_ms(r)
            << " ms, past its limit of " << r.limit_ms << " ms";
        if (over.size() > 1) why << " (ranks over their limit: " << ranks_text(over) << ")";
    } else {
        why << "ranks " << ranks_text(too_silent) << " silent for more than " << rules.silence_limit_ms << " ms";
    }
    if (!v.suspects.empty()) {
        v.hung = v.suspects;
        if (!over.empty()) why << "; silent: " << ranks_text(v.suspects);
        v.why = why.str();
        return v;
    }
    std::tuple<int64_t, int, uint64_t> least{INT64_MAX, 0, 0};
    std::set<int> watched;
    for (size_t i = 0; i < ranks.size(); ++i) {
        if (!ranks[i].watched) continue;
        watched.insert(static_cast<int>(i));
        least = std::min(least, position(ranks[i]));
    }
    for (int rank : watched) {
        if (position(ranks[rank]) == least) v.hung.insert(rank);
    }
    why << "; furthest behind: " << ranks_text(v.hung) << " at step " << std::get<0>(least) << " with "
        << std::get<2>(least) << " units of work in its section";
    if (v.hung.size() == watched.size()) why << " (no rank is behind the others: a collective or the network hangs)";
    v.why = why.str();
    return v;
}

}  // namespace mindio
