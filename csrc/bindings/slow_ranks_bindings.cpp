// The slow-rank judge (controller/slow_ranks.h) on synthetic steps, for its unit tests.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tuple>

#include "controller/slow_ranks.h"

namespace py = pybind11;
using namespace mindio;

void bind_slow_ranks(py::module_& m) {
    m.def("judge_slow_ranks", [](const std::vector<std::tuple<int, int64_t, int64_t>>& computes,
                                 const std::set<int>& live, double factor, int window_steps, int windows) {
        SlowRankJudge judge(SlowRules{factor, 20, window_steps, windows});
        for (const auto& [rank, step, ms] : computes) judge.record(rank, step, ms);
        py::list news;
        for (const auto& n : judge.judge(live)) news.append(py::make_tuple(n.rank, n.slow, n.why));
        return news;
    }, py::arg("computes"), py::arg("live"), py::arg("factor") = 1.5, py::arg("window_steps") = 10,
       py::arg("windows") = 3,
       "[(rank, slow, why)] after the (rank, step, compute_ms) records, for the windows every live rank completed");
}
