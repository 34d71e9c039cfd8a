// The load generator of bench/controller_scale.py (see sim/processor_sim.h). Blocking calls release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "sim/processor_sim.h"

namespace py = pybind11;
using namespace mindio;

void bind_sim(py::module_& m) {
    py::class_<ProcessorSim>(m, "ProcessorSim", "count simulated processors on one epoll thread (benchmarks only)")
        .def(py::init([](const std::string& host, int port, int first_rank, int count, int world_size, double heartbeat_s,
                         int dp_size, int replica_cnt, const std::string& token, int connect_window) {
                 SimConfig cfg;
                 cfg.host = host;
                 cfg.port = port;
                 cfg.first_rank = first_rank;
                 cfg.count = count;
                 cfg.world_size = world_size;
                 cfg.heartbeat_ms = static_cast<uint32_t>(heartbeat_s * 1000 + 0.5);
                 cfg.dp_size = dp_size;
                 cfg.replica_cnt = replica_cnt;
                 cfg.token = token;
                 cfg.connect_window = connect_window;
                 try {
                     return std::make_unique<ProcessorSim>(cfg);
                 } catch (const std::invalid_argument& e) {
                     throw py::value_error(e.what());
                 }
             }),
             py::arg("host"), py::arg("port"), py::arg("first_rank"), py::arg("count"), py::arg("world_size"),
             py::arg("heartbeat_s") = 2.0, py::arg("dp_size") = 8, py::arg("replica_cnt") = 2, py::arg("token") = "",
             py::arg("connect_window") = 256)
        .def("start", &ProcessorSim::start)
        .def("stop", &ProcessorSim::stop, py::call_guard<py::gil_scoped_release>())
        .def("report_error", [](ProcessorSim& s, int rank, int state, const std::string& code, double timeout_s) {
            py::gil_scoped_release nogil;
            return s.report_error(rank, static_cast<uint8_t>(state), code, static_cast<int>(timeout_s * 1000));
        }, py::arg("rank"), py::arg("state"), py::arg("code") = "", py::arg("timeout_s") = 5.0,
           "-> time.monotonic() at which the ErrorReport was written")
        .def("stop_times", &ProcessorSim::stop_times,
             "per rank: time.monotonic() at which the loop thread handled its last Stop, -1 for none")
        .def("stop_arrivals", &ProcessorSim::stop_arrivals,
             "per rank: time.monotonic() at which the kernel received its last Stop (socket timestamp), -1 for none")
        .def("clear_stops", &ProcessorSim::clear_stops)
        .def("stats", &ProcessorSim::stats)
        .def("first_error", &ProcessorSim::first_error);
}
