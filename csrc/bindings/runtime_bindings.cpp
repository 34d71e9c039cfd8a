// The controller and processor objects. Every call that can block releases the GIL; Python
// callables are called with the GIL taken only for the call, and released objects are destroyed
// under the GIL.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common/config.h"

namespace py = pybind11;
using namespace mindio;

py::dict action_to_dict(const ActionMsg& m);

namespace {

using release = py::call_guard<py::gil_scoped_release>;

std::shared_ptr<py::function> hold(py::function fn) {
    return std::shared_ptr<py::function>(new py::function(std::move(fn)), [](py::function* f) {
        py::gil_scoped_acquire gil;
        delete f;
    });
}

py::dict goodput_dict(const GoodputTotals& t) {
    py::list recoveries;
    for (const auto& r : t.recoveries) {
        py::dict d;
        d["number"] = r.number;
        d["phases"] = r.phases;
        d["recomputed_s"] = r.recomputed_s;
        recoveries.append(d);
    }
    py::dict out;
    out["wall_s"] = t.wall_s;
    out["uses"] = t.uses;
    out["recoveries"] = recoveries;
    return out;
}

py::dict cluster_dict(const std::map<int, int>& faults) {
    py::dict d;
    for (auto [rank, code] : faults) d[py::int_(rank)] = code;
    return d;
}

void call_cluster(const py::function& fn, const ClusterReport& r) {
    py::dict faults = cluster_dict(r.fault_ranks);
    if (r.action == "report_fault_ranks") fn(faults);
    else if (r.action == "report_stop_complete") fn(0, "stop complete", faults);
    else if (r.action == "report_strategies") fn(faults, r.strategies);
    else fn(r.result, r.result == 0 ? "ok" : "failed", faults, r.strategy);
}

ReplicaInfoMsg replica_from_py(int rank, const py::list& groups, const std::string& domain) {
    ReplicaInfoMsg info;
    info.rank = rank;
    info.domain = domain;
    for (auto item : groups) {
        auto d = item.cast<py::dict>();
        ReplicaGroupMsg g;
        g.optimizer_type = d["optimizer_type"].cast<uint8_t>();
        g.replica_cnt = d["replica_cnt"].cast<int32_t>();
        g.replica_shift = d.contains("replica_shift") ? d["replica_shift"].cast<int32_t>() : 0;
        g.ranks = d["rank_list"].cast<std::vector<int32_t>>();
        info.groups.push_back(std::move(g));
    }
    return info;
}

// The policy callback, GIL taken only for the call. A Python exception or a non-string answer
// becomes a C++ exception carrying its text, which the controller logs before falling back.
PolicyCallback policy_from_py(std::shared_ptr<py::function> held) {
    return [held](int rank, int report_state, const std::string& code) {
        py::gil_scoped_acquire gil;
        try {
            py::object answer = (*held)(rank, report_state, code);
            if (!py::isinstance<py::str>(answer)) {
                throw std::runtime_error("returned " + std::string(py::repr(answer)) + ", expected a strategy name");
            }
            return answer.cast<std::string>();
        } catch (py::error_already_set& e) {
            throw std::runtime_error(e.what());
        }
    };
}

template <typename Fn>
auto translate_errors(Fn&& fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
    }
}

}  // namespace

void bind_runtime(py::module_& m) {
    // A restarted process refused because the controller ends the job: the rank ends with it.
    py::register_exception<JobEnding>(m, "JobEnding", PyExc_ValueError);
    m.def("action_time_limit_ms", [] { return translate_errors([] { return action_time_limit_ms(); }); },
          "The handler time limit from TTP_NORMAL_ACTION_TIME_LIMIT (or MINDIO_TEST_ACTION_TIME_LIMIT).");

    py::class_<Controller>(m, "Controller")
        .def(py::init([](int rank, int world_size, bool retry, bool recover, uint64_t term, bool elastic) {
                 return translate_errors([&] {
                     ControllerConfig cfg = controller_config_from_env(rank, world_size);
                     cfg.caps.retry = retry;
                     cfg.caps.recover = recover;
                     cfg.caps.elastic = elastic;
                     cfg.term = term;
                     return std::make_unique<Controller>(cfg);
                 });
             }),
             py::arg("rank"), py::arg("world_size"), py::arg("retry") = true, py::arg("recover") = false,
             py::arg("term") = 1, py::arg("elastic") = false,
             "term 0: a backup, which takes over when ranks register with it; elastic: a process replacement "
             "that times out scales the job in instead of dumping")
        .def("term", &Controller::term, "1 for the first controller, one more for each takeover; 0: an idle backup")
        .def("layout", [](const Controller& c) {
            py::list out;
            for (const auto& s : c.layout()) {
                py::dict d;
                d["optimizer_type"] = s.optimizer_type;
                d["group"] = s.group_index;
                d["replica_cnt"] = s.replica_cnt;
                d["ranks"] = s.ranks;
                out.append(d);
            }
            return out;
        }, "[{'optimizer_type', 'group', 'replica_cnt', 'ranks'}] per rank list the ranks reported")
        .def("start", &Controller::start, py::arg("host"), py::arg("port"), release(), "-> the bound port")
        .def("stop", &Controller::stop, release())
        .def("state", [](const Controller& c) { return std::string(state_name(c.state())); })
        .def("repair_step", &Controller::repair_step)
        .def("events", [](const Controller& c) {
            py::list out;
            for (const auto& e : c.events()) out.append(py::make_tuple(e.t, e.kind, e.detail));
            return out;
        })
        .def("event_count", &Controller::event_count)
        .def("stats", &Controller::stats)
        .def("ranks", [](const Controller& c) {
            static const char* data_names[] = {"updated", "updating", "copying"};
            py::list out;
            for (const auto& v : c.ranks()) {
                py::dict d;
                d["step"] = v.step;
                d["data"] = data_names[static_cast<int>(v.data)];
                d["flags"] = v.flags;
                d["silent_ms"] = v.silent_ms;
                d["heartbeat_ms"] = v.heartbeat_ms;
                d["domain"] = v.domain;
                out.append(d);
            }
            return out;
        }, "[{'step', 'data', 'flags', 'silent_ms', 'heartbeat_ms', 'domain'}] per rank, as the controller knows them "
           "(silent_ms: since it last heard from the rank, -1 while not connected)")
        .def("set_cluster_callback", [](Controller& c, const std::string& action, py::function fn) {
            auto held = hold(std::move(fn));
            translate_errors([&] {
                c.set_cluster_callback(action, [held](const ClusterReport& r) {
                    py::gil_scoped_acquire gil;
                    call_cluster(*held, r);
                });
            });
        })
        .def("notify_faults", [](Controller& c, const std::map<int, int>& f) { translate_errors([&] { c.notify_faults(f); }); })
        .def("notify_strategy", [](Controller& c, const std::string& s) { translate_errors([&] { c.notify_strategy(s); }); })
        .def("set_policy", [](Controller& c, py::object fn, double timeout_s) {
            int timeout_ms = static_cast<int>(timeout_s * 1000);
            PolicyCallback cb;
            if (!fn.is_none()) {
                if (!PyCallable_Check(fn.ptr())) throw py::type_error("policy must be callable or None");
                cb = policy_from_py(hold(fn.cast<py::function>()));
            }
            translate_errors([&] { c.set_policy(std::move(cb), timeout_ms); });
        }, py::arg("policy"), py::arg("timeout_s") = 5.0,
           "policy(rank, report_state, code) -> 'none'|'retry'|'recover'|'dump'|'exit', or None to remove it")
        .def("goodput", [](const Controller& c) { return goodput_dict(c.goodput()); },
             "where the job's wall time went so far: {'wall_s', 'uses': {use: s}, 'recoveries': [{'number', "
             "'phases': {state: s}, 'recomputed_s'}]} (controller/goodput.h)")
        .def("notify_dump", &Controller::notify_dump)
        .def("notify_pause", [](Controller& c, int64_t after_step, double hold_s) {
            return c.notify_pause(after_step, static_cast<int>(hold_s * 1000));
        }, py::arg("after_step") = -1, py::arg("hold_s") = kDefaultPauseHoldMs / 1000.0,
           "pause every rank after `after_step` (-1: the next step all can hold after) for at most hold_s; "
           "'' when asked for, else why not")
        .def("notify_hot_switch", [](Controller& c, const std::set<int>& ranks, int64_t after_step) {
            return c.notify_hot_switch(ranks, after_step);
        }, py::arg("ranks"), py::arg("after_step") = -1,
           "hand `ranks` over to new processes once every rank holds after `after_step` (-1: the next step all "
           "can hold after); '' when asked for, else why not")
        .def("cancel_hot_switch", &Controller::cancel_hot_switch,
             "withdraw a hot switch asked for and not begun; '' or why not");

    py::class_<Processor, std::shared_ptr<Processor>>(m, "Processor")
        .def(py::init([](int rank, int world_size, py::object backoff_base_s) {
                 return translate_errors([&] {
                     ProcessorConfig cfg = processor_config_from_env(rank, world_size);
                     if (!backoff_base_s.is_none()) cfg.backoff_base_ms = static_cast<int>(backoff_base_s.cast<double>() * 1000);
                     return std::make_shared<Processor>(cfg);
                 });
             }),
             py::arg("rank"), py::arg("world_size"), py::arg("backoff_base_s") = py::none())
        .def("set_dispatcher", [](Processor& p, py::function fn) {
            auto held = hold(std::move(fn));
            p.set_dispatcher([held](const ActionMsg& msg) {
                py::gil_scoped_acquire gil;
                py::dict d = action_to_dict(msg);
                d["name"] = action_name(msg.kind);
                py::tuple r = (*held)(d);
                return std::make_pair(r[0].cast<int>(), r[1].cast<std::string>());
            });
        }, "fn(action: dict) -> (code, message), called on the processor's worker thread")
        .def("start", [](Processor& p, const std::string& host, int port) {
            try {
                p.start(host, port);
            } catch (const std::runtime_error& e) {
                throw py::value_error(e.what());
            }
        }, release())
        .def("start_with", [](Processor& p, const std::vector<Endpoint>& controllers) {
            try {
                p.start(controllers);
            } catch (const JobEnding&) {
                throw;  // translated to the module's JobEnding (a ValueError)
            } catch (const std::exception& e) {
                throw py::value_error(e.what());
            }
        }, py::arg("controllers"), release(),
           "connect to the first of [(host, port), ...] that registers this rank: the active controller, "
           "then its backups in takeover order")
        .def("controller_address", &Processor::controller_address,
             "host:port of the controller it registers with now")
        .def("replace_controller", [](Processor& p, std::size_t index, const std::string& host, int port) {
            try {
                p.replace_controller(index, {host, port});
            } catch (const std::out_of_range& e) {
                throw py::index_error(e.what());
            }
        }, py::arg("index"), py::arg("host"), py::arg("port"),
           "the list's entry `index` names the controller at host:port from the next connection attempt on")
        .def("stop", &Processor::stop, release())
        .def("set_replica", [](Processor& p, int rank, const py::list& groups, const std::string& domain) {
            ReplicaInfoMsg info = replica_from_py(rank, groups, domain);
            try {
                py::gil_scoped_release nogil;
                p.set_replica(info);
            } catch (const ProtocolError& e) {  // a layout the wire refuses: the caller's mistake
                throw py::value_error(e.what());
            }
        }, py::arg("rank"), py::arg("groups"), py::arg("domain") = "",
           "the replica layout and this rank's failure domain (its node; '': not said)")
        .def("cut_off", &Processor::cut_off,
             "why this rank is cut off from the job (a minority that reaches no leader), or ''")
        .def("wait_cut_off", [](Processor& p, double timeout_s) {
            py::gil_scoped_release nogil;
            return p.wait_cut_off(static_cast<int>(timeout_s * 1000));
        }, py::arg("timeout_s"),
           "waits at most timeout_s for the rank to be cut off: the reason, '' when the wait ran out, None once "
           "the processor is stopped")
        .def("controller_term", &Processor::controller_term,
             "the term of the controller this rank last registered with (0: none yet)")
        .def("start_updating", &Processor::start_updating, release())
        .def("end_updating", &Processor::end_updating, release())
        .def("start_copy", &Processor::start_copy, release())
        .def("report_loaded_step", [](Processor& p, int64_t step) {
            translate_errors([&] {
                py::gil_scoped_release nogil;
                p.report_loaded_step(step);
            });
        })
        .def("report_ckpt_step", [](Processor& p, int64_t step) {
            translate_errors([&] {
                py::gil_scoped_release nogil;
                p.report_ckpt_step(step);
            });
        })
        .def("begin_section", [](Processor& p, const std::string& name, double limit_s) {
            Section section = parse_section(name).value_or(Section::None);
            if (section == Section::None) throw py::value_error("unknown section '" + name + "': step, save or eval");
            if (!(limit_s >= 0)) throw py::value_error("section limit must be >= 0 seconds");
            py::gil_scoped_release nogil;
            p.begin_section(section, static_cast<int64_t>(limit_s * 1000.0));
        }, py::arg("name"), py::arg("limit_s"), "a timed section starts (limit 0: none)")
        .def("end_section", &Processor::end_section, release())
        .def("add_progress", &Processor::add_progress, py::arg("units") = 1)
        .def("finish", &Processor::finish, release(), "training is over on this rank: later faults are not acted on")
        .def("report_error", &Processor::report_error, release())
        .def("wait_next_action", [](Processor& p, double timeout_s) {
            py::gil_scoped_release nogil;
            return static_cast<int>(p.wait_next_action(static_cast<int>(timeout_s * 1000)));
        }, "-> 0 retry, 1 exit, -1 timed out, -2 controller lost")
        .def("repair_step", &Processor::repair_step)
        .def("prelock_step", &Processor::prelock_step, "-1, or the step of the controller's PRELOCK in force")
        .def("repair_type", [](const Processor& p) { return std::string(strategy_name(p.repair_type())); })
        .def("exit_ranks", &Processor::exit_ranks, "the ranks the last EXIT named (a hot switch's), [] before one")
        .def("paused", &Processor::paused)
        .def("hold_if_paused", [](Processor& p, double timeout_s) {
            py::gil_scoped_release nogil;
            return p.hold_if_paused(timeout_s < 0 ? -1 : static_cast<int>(timeout_s * 1000));
        }, py::arg("timeout_s") = -1.0,
           "holds while paused after a step this rank completed; False when still held after timeout_s")
        .def("restarted", &Processor::restarted,
             "started again for a dead rank (MINDIO_RESTARTED=1), or accepted as its replacement at registration")
        .def("allow_replacement", &Processor::allow_replacement, py::arg("allowed"),
             "before start: the first registration may replace a dead rank (the controller decides)")
        .def("controller_closed", &Processor::controller_closed, "the controller's goodbye reason, or ''")
        .def("connected", &Processor::connected, "whether the link to the controller is up now")
        .def("stats", &Processor::stats);
}
