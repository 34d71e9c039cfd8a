#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "controller/liveness.h"
#include "controller/state_machine.h"

namespace py = pybind11;
using namespace mindio;

namespace {

DecisionInput decision_input(const std::vector<std::string>& kinds, bool during_repair, bool repairable,
                             bool dump_possible) {
    DecisionInput in;
    for (const auto& k : kinds) {
        bool found = false;
        for (uint8_t i = 0; i < 4; ++i) {
            if (k == fault_kind_name(static_cast<FaultKind>(i))) {
                in.kinds.insert(static_cast<FaultKind>(i));
                found = true;
            }
        }
        if (!found) throw py::value_error("unknown fault kind '" + k + "'");
    }
    in.during_repair = during_repair;
    in.repairable = repairable;
    in.dump_possible = dump_possible;
    return in;
}

Capabilities capabilities(bool retry, bool recover) {
    Capabilities caps;
    caps.retry = retry;
    caps.recover = recover;
    return caps;
}

}  // namespace

void bind_state_machine(py::module_& m) {
    py::list states;
    for (int i = 0; i < kNumStates; ++i) states.append(state_name(static_cast<State>(i)));
    m.attr("STATES") = states;
    m.attr("STRATEGIES") = py::make_tuple("none", "retry", "recover", "dump", "exit");
    m.attr("FAULT_KINDS") = py::make_tuple("memory", "communication", "node", "unknown");
    auto state_of = [](const std::string& name) {
        for (int i = 0; i < kNumStates; ++i) {
            if (name == state_name(static_cast<State>(i))) return static_cast<State>(i);
        }
        throw py::value_error("unknown controller state '" + name + "'");
    };
    m.def("transition_allowed", [state_of](const std::string& from, const std::string& to) {
        return transition_allowed(state_of(from), state_of(to));
    });
    m.def("transition_table", [] {
        std::vector<std::pair<std::string, std::string>> out;
        for (auto [a, b] : transition_table()) out.emplace_back(state_name(a), state_name(b));
        return out;
    });
    m.def("fault_kind_of_report", [](int report_state) -> py::object {
        if (report_state < 0 || report_state > 8) throw py::value_error("report state out of range 0..8");
        auto kind = fault_kind_of(static_cast<ReportState>(report_state));
        if (!kind) return py::none();
        return py::str(fault_kind_name(*kind));
    });
    m.def("decide", [](const std::vector<std::string>& kinds, bool retry, bool recover, bool during_repair,
                       bool repairable, bool dump_possible, bool reload_possible) {
        DecisionInput in = decision_input(kinds, during_repair, repairable, dump_possible);
        in.reload_possible = reload_possible;
        return std::string(strategy_name(decide(capabilities(retry, recover), in)));
    }, py::arg("kinds"), py::arg("retry"), py::arg("recover"), py::arg("during_repair"), py::arg("repairable"),
       py::arg("dump_possible"), py::arg("reload_possible") = false);
    m.def("combine_with_policy", [](const std::vector<std::string>& kinds, const std::string& policy, bool retry,
                                    bool recover, bool during_repair, bool repairable, bool dump_possible) {
        DecisionInput in = decision_input(kinds, during_repair, repairable, dump_possible);
        auto asked = parse_strategy(policy);
        if (!asked) throw py::value_error("unknown strategy '" + policy + "'");
        Capabilities caps = capabilities(retry, recover);
        Strategy builtin = decide(caps, in);
        return py::make_tuple(strategy_name(builtin), strategy_name(combine_with_policy(caps, in, builtin, *asked)));
    }, py::arg("kinds"), py::arg("policy"), py::arg("retry"), py::arg("recover"), py::arg("during_repair"),
       py::arg("repairable"), py::arg("dump_possible"),
       "-> (built-in decision, decision after the policy's answer), as the controller combines them");
    m.def("judge_liveness", [](const std::vector<py::dict>& ranks, double heartbeat_misses, int64_t silence_limit_ms) {
        std::vector<RankSighting> sightings;
        for (const auto& d : ranks) {
            RankSighting s;
            s.watched = d.contains("watched") ? d["watched"].cast<bool>() : true;
            s.silent_ms = d.contains("silent_ms") ? d["silent_ms"].cast<int64_t>() : 0;
            s.heartbeat_ms = d.contains("heartbeat_ms") ? d["heartbeat_ms"].cast<int64_t>() : 2000;
            s.step = d.contains("step") ? d["step"].cast<int64_t>() : -1;
            std::string section = d.contains("section") ? d["section"].cast<std::string>() : "none";
            auto parsed = parse_section(section);
            if (!parsed) throw py::value_error("unknown section '" + section + "'");
            s.section = *parsed;
            s.section_ms = d.contains("section_ms") ? d["section_ms"].cast<int64_t>() : 0;
            s.limit_ms = d.contains("limit_ms") ? d["limit_ms"].cast<int64_t>() : 0;
            s.section_progress = d.contains("progress") ? d["progress"].cast<uint64_t>() : 0;
            sightings.push_back(s);
        }
        LivenessVerdict v = judge_liveness(sightings, LivenessRules{heartbeat_misses, silence_limit_ms});
        py::dict out;
        out["suspects"] = std::vector<int>(v.suspects.begin(), v.suspects.end());
        out["hung"] = std::vector<int>(v.hung.begin(), v.hung.end());
        out["why"] = v.why;
        return out;
    }, py::arg("ranks"), py::arg("heartbeat_misses") = 3.0, py::arg("silence_limit_ms") = 60000,
       "The controller's liveness judgement on synthetic sightings: per rank a dict of watched, silent_ms, "
       "heartbeat_ms, step, section, section_ms, limit_ms, progress -> {'suspects', 'hung', 'why'}");
}
