// What a backup that took over settles (controller/takeover.h), on synthetic ranks, for its unit tests.
// A rank is None (never registered with the new controller), "" (registered, no recovery in progress)
// or the name of the last action of the old controller's recovery it ran ("stop", "repair", ...).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

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
