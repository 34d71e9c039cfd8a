// The pybind11 module mindio_adaptor._native. Each area binds itself in its own file.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_protocol(py::module_& m);
void bind_replica(py::module_& m);
void bind_state_machine(py::module_& m);
void bind_planner(py::module_& m);
void bind_runtime(py::module_& m);
void bind_sim(py::module_& m);
void bind_takeover(py::module_& m);
void bind_scale_out(py::module_& m);
void bind_pause(py::module_& m);
void bind_goodput(py::module_& m);
void bind_slow_ranks(py::module_& m);
void bind_flow_runner(py::module_& m);

PYBIND11_MODULE(_native, m) {
    m.doc() = "mindio_adaptor native core: wire protocol, replica manager, controller, processor client";
    bind_protocol(m);
    bind_replica(m);
    bind_state_machine(m);
    bind_planner(m);
    bind_runtime(m);
    bind_sim(m);
    bind_takeover(m);
    bind_scale_out(m);
    bind_pause(m);
    bind_goodput(m);
    bind_slow_ranks(m);
    bind_flow_runner(m);
}
