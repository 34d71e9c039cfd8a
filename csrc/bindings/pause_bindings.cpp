// Pause at a step boundary (controller/pause.h), on synthetic ranks, for its unit tests. The live ranks are
// a dict rank -> (last completed step, holds, finished).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tuple>

#include "controller/pause.h"

namespace py = pybind11;
using namespace mindio;

namespace {

std::map<int, PauseSighting> sightings(const std::map<int, std::tuple<int64_t, bool, bool>>& live) {
    std::map<int, PauseSighting> out;
    for (const auto& [rank, r] : live) out[rank] = PauseSighting{std::get<0>(r), std::get<1>(r), std::get<2>(r)};
    return out;
}

}  // namespace

void bind_pause(py::module_& m) {
    m.attr("DEFAULT_PAUSE_HOLD_MS") = kDefaultPauseHoldMs;
    m.attr("MAX_PAUSE_HOLD_MS") = kMaxPauseHoldMs;
    m.def("pause_step", [](const std::map<int, std::tuple<int64_t, bool, bool>>& live, int64_t asked) {
        std::string why;
        int64_t step = pause_step(sightings(live), asked, &why);
        return py::make_tuple(step, why);
    }, py::arg("live"), py::arg("asked"), "(the step a pause holds after, '') or (-1, why it cannot be kept)");
    m.def("judge_hold", [](const std::map<int, std::tuple<int64_t, bool, bool>>& live, int64_t step) {
        static const char* kinds[] = {"waiting", "holding", "passed", "ended"};
        HoldVerdict v = judge_hold(sightings(live), step);
        py::dict out;
        out["kind"] = kinds[v.kind];
        out["behind"] = v.behind;
        out["rank"] = v.rank;
        out["rank_step"] = v.rank_step;
        return out;
    }, py::arg("live"), py::arg("step"), "where the live ranks stand with respect to a pause after `step`");
}
