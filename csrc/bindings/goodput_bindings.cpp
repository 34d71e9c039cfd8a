// The goodput ledger (controller/goodput.h) on a synthetic timeline, for its unit tests: a list of
// (seconds since start, state name, highest completed step, activity) observations, then the totals.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tuple>

#include "controller/goodput.h"

namespace py = pybind11;
using namespace mindio;

namespace {

State state_named(const std::string& name) {
    for (int i = 0; i < kNumStates; ++i) {
        if (name == state_name(static_cast<State>(i))) return static_cast<State>(i);
    }
    throw py::value_error("unknown state '" + name + "'");
}

GoodputLedger::Activity activity_named(const std::string& name) {
    if (name == "training") return GoodputLedger::Activity::Training;
    if (name == "saving") return GoodputLedger::Activity::Saving;
    if (name == "starting") return GoodputLedger::Activity::StartingUp;
    throw py::value_error("unknown activity '" + name + "' (training, saving, starting)");
}

}  // namespace

void bind_goodput(py::module_& m) {
    using Observation = std::tuple<double, std::string, int64_t, std::string>;
    m.def("goodput_of_timeline", [](const std::vector<Observation>& timeline, double finished_at, double now) {
        const auto start = GoodputLedger::Clock::time_point{};
        auto at = [&](double s) { return start + std::chrono::duration_cast<GoodputLedger::Clock::duration>(
                                                     std::chrono::duration<double>(s)); };
        GoodputLedger ledger(start);
        for (const auto& [t, state, step, activity] : timeline) {
            ledger.observe(at(t), state_named(state), step, activity_named(activity));
        }
        if (finished_at >= 0) ledger.finish(at(finished_at));
        GoodputTotals totals = ledger.totals(at(now));
        py::list recoveries;
        for (const auto& r : totals.recoveries) recoveries.append(py::make_tuple(r.number, r.phases, r.recomputed_s));
        return py::make_tuple(totals.wall_s, totals.uses, recoveries);
    }, py::arg("timeline"), py::arg("finished_at"), py::arg("now"),
       "(wall_s, uses, [(number, phases, recomputed_s)]) of a synthetic timeline (finished_at < 0: not finished)");
}
