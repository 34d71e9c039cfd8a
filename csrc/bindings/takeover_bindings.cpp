// Whether an idle backup may lead (controller/election.h), whether a leader holds its lease
// (controller/lease.h) and what a backup that took over settles (controller/takeover.h), on synthetic
// ranks, for their unit tests.
// judge_election: each candidate is (rank, term it registered under last, whether it proved that
// controller's process gone). plan_takeover: a rank is None (never registered with the new controller), "" (registered, no recovery in progress)
// or the name of the last action of the old controller's recovery it ran ("stop", "repair", ...).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tuple>

#include "controller/election.h"
#include "controller/lease.h"
#include "controller/takeover.h"

namespace py = pybind11;
using namespace mindio;

namespace {

TakeoverRank takeover_rank(const py::handle& spec) {
    if (spec.is_none()) return {};
    auto name = spec.cast<std::string>();
    if (name.empty()) return {true, 0};
    for (uint16_t k = 1; k <= kMaxActionKind; ++k) {
        if (name == action_name(static_cast<ActionKind>(k))) return {true, k};
    }
    throw py::value_error("unknown action '" + name + "'");
}

}  // namespace

void bind_takeover(py::module_& m) {
    m.def("judge_election", [](int world_size, const std::vector<std::tuple<int, uint64_t, bool>>& candidates) {
        std::vector<Candidate> view;
        for (const auto& [rank, term, gone] : candidates) view.push_back({rank, term, gone});
        ElectionVerdict v = judge_election(world_size, view);
        py::dict out;
        out["lead"] = v.lead;
        out["term"] = v.term;
        out["supporters"] = v.supporters;
        out["proof_rank"] = v.proof_rank;
        out["why"] = v.why;
        return out;
    }, py::arg("world_size"), py::arg("candidates"),
       "Whether an idle backup leads: candidates are (rank, term, leader_gone); -> lead, term, supporters, "
       "proof_rank, why.");
    m.def("judge_lease", [](const std::vector<std::tuple<bool, bool>>& ranks) {
        std::vector<LeaseRank> view;
        for (const auto& [heard, proven] : ranks) view.push_back({heard, proven});
        LeaseVerdict v = judge_lease(view);
        py::dict out;
        out["held"] = v.held;
        out["counted"] = v.counted;
        out["unknown"] = v.unknown;
        out["why"] = v.why;
        return out;
    }, py::arg("ranks"), "Whether a leader holds its lease: ranks are (heard, proven ended); -> held, counted, unknown, why.");
    m.def("majority_of", &majority_of, py::arg("world_size"), "the smallest strict majority of world_size ranks");
    m.def("plan_takeover", [](const py::list& ranks, const std::set<int>& faulty) {
        std::vector<TakeoverRank> view;
        for (auto spec : ranks) view.push_back(takeover_rank(spec));
        TakeoverPlan plan = plan_takeover(view, faulty);
        py::dict interrupted;
        for (const auto& [rank, kind] : plan.interrupted) interrupted[py::int_(rank)] = action_name(kind);
        py::dict out;
        out["missing"] = plan.missing;
        out["interrupted"] = interrupted;
        out["resume"] = takeover_resume_name(plan.resume);
        out["why"] = plan.why;
        return out;
    }, py::arg("ranks"), py::arg("faulty") = std::set<int>{},
       "What a backup that took over settles: missing ranks, the recovery it found, restart or dump.");
}
