#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "controller/replica_manager.h"

namespace py = pybind11;
using namespace mindio;

void bind_replica(py::module_& m) {
    py::class_<ReplicaManager>(m, "ReplicaManager", "The controller's replica manager (for tests and tools).")
        .def(py::init<>())
        .def("add", [](ReplicaManager& self, int optimizer_type, int replica_cnt, int replica_shift,
                       const std::vector<int>& ranks) {
            try {
                self.add(optimizer_type, replica_cnt, replica_shift, ranks);
            } catch (const std::invalid_argument& e) {
                throw py::value_error(e.what());
            }
        }, py::arg("optimizer_type"), py::arg("replica_cnt"), py::arg("replica_shift"), py::arg("ranks"))
        .def("savers", [](const ReplicaManager& self, const std::set<int>& unavailable) {
            SaverPlan plan = self.savers(unavailable);
            py::dict chosen;
            py::list missing;
            for (const auto& s : plan.savers) chosen[py::make_tuple(s.optimizer_type, s.group_index, s.shard)] = s.rank;
            for (const auto& s : plan.missing) missing.append(py::make_tuple(s.optimizer_type, s.group_index, s.shard));
            return py::make_tuple(chosen, missing);
        }, "-> ({(type, group, shard): rank}, [(type, group, shard) with no available holder])")
        .def("repair_pairs", [](const ReplicaManager& self, const std::set<int>& bad) {
            py::dict out;
            for (const auto& [type, plan] : self.repair_pairs(bad)) out[py::int_(type)] = py::make_tuple(plan.pairs, plan.orphans);
            return out;
        }, "-> {type: ([(src, dst)], [orphans])}")
        .def("rank_lists", [](const ReplicaManager& self) {
            py::list out;
            for (const auto& s : self.sets()) out.append(py::make_tuple(s.optimizer_type, s.group_index, s.replica_cnt, s.ranks));
            return out;
        });
}
