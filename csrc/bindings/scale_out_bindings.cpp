// When a scaled-in job grows back (controller/scale_out.h), on synthetic ranks, for its unit tests. A
// rank is a dict of the flags retired, joining, ready, connected (each False when left out).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "controller/scale_out.h"

namespace py = pybind11;
using namespace mindio;

namespace {

ReturnView return_view(const py::dict& spec) {
    static const char* known[] = {"retired", "joining", "ready", "connected"};
    for (auto item : spec) {
        auto key = item.first.cast<std::string>();
        bool ok = false;
        for (const char* k : known) ok = ok || key == k;
        if (!ok) throw py::value_error("unknown rank flag '" + key + "'");
    }
    auto flag = [&](const char* k) { return spec.contains(k) && spec[k].cast<bool>(); };
    return {flag("retired"), flag("joining"), flag("ready"), flag("connected")};
}

}  // namespace

void bind_scale_out(py::module_& m) {
    m.def("judge_scale_out", [](const py::list& ranks, int64_t waited_ms, int64_t wait_ms) {
        std::vector<ReturnView> view;
        for (auto spec : ranks) view.push_back(return_view(spec.cast<py::dict>()));
        ScaleOutJudgement j = judge_scale_out(view, waited_ms, wait_ms);
        py::dict out;
        out["verdict"] = scale_out_verdict_name(j.verdict);
        out["retired"] = j.retired;
        out["returned"] = j.returned;
        out["ready"] = j.ready;
        out["partial"] = j.partial;
        out["absent"] = j.absent;
        out["sent_away"] = j.sent_away;
        out["why"] = j.why;
        return out;
    }, py::arg("ranks"), py::arg("waited_ms"), py::arg("wait_ms"),
       "Whether a scaled-in job scales out now: nothing, wait, start (whole or partial) or abandon "
       "(controller/scale_out.h).");
}
