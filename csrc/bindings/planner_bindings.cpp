// The controller's pure planner (controller/planner.h) on synthetic inputs, for its unit tests.
// A rank is given as its completed step (an int) or a dict of step, ckpt_step, data ("updated",
// "updating", "copying") and the flags registered (default true), dead, excluded, joining, left;
// a layout as [(optimizer_type, replica_cnt, ranks)]; faults as {rank: kind name}.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "controller/flows.h"
#include "controller/planner.h"

namespace py = pybind11;
using namespace mindio;

namespace {

using Layout = std::vector<std::tuple<int, int, std::vector<int>>>;

DataStatus data_status(const std::string& name) {
    static const char* names[] = {"updated", "updating", "copying"};
    for (uint8_t i = 0; i < 3; ++i) {
        if (name == names[i]) return static_cast<DataStatus>(i);
    }
    throw py::value_error("unknown data status '" + name + "'");
}

RankSnapshot rank_snapshot(const py::handle& spec) {
    RankSnapshot r;
    r.registered = true;
    if (py::isinstance<py::int_>(spec)) {
        r.step = spec.cast<int64_t>();
        return r;
    }
    auto d = spec.cast<py::dict>();
    auto flag = [&](const char* key, bool fallback) { return d.contains(key) ? d[key].cast<bool>() : fallback; };
    r.step = d.contains("step") ? d["step"].cast<int64_t>() : -1;
    r.ckpt_step = d.contains("ckpt_step") ? d["ckpt_step"].cast<int64_t>() : -1;
    r.data = data_status(d.contains("data") ? d["data"].cast<std::string>() : "updated");
    r.registered = flag("registered", true);
    r.dead = flag("dead", false);
    r.excluded = flag("excluded", false);
    r.joining = flag("joining", false);
    r.left = flag("left", false);
    return r;
}

RankSnapshots snapshots(const py::list& ranks) {
    RankSnapshots out;
    for (auto spec : ranks) out.push_back(rank_snapshot(spec));
    return out;
}

ReplicaManager replicas(const Layout& layout) {
    ReplicaManager m;
    for (const auto& [type, replica_cnt, ranks] : layout) {
        try {
            m.add(type, replica_cnt, 0, ranks);
        } catch (const std::invalid_argument& e) {
            throw py::value_error(e.what());
        }
    }
    return m;
}

FaultKind fault_kind(const std::string& name) {
    for (uint8_t i = 0; i < 4; ++i) {
        if (name == fault_kind_name(static_cast<FaultKind>(i))) return static_cast<FaultKind>(i);
    }
    throw py::value_error("unknown fault kind '" + name + "'");
}

Faults faults_of(const std::map<int, std::string>& kinds) {
    Faults out;
    for (const auto& [rank, kind] : kinds) out.emplace(rank, Fault{fault_kind(kind), "test", {}});
    return out;
}

Strategy strategy(const std::string& name) {
    // Never asked for by a policy (parse_strategy), but a flow of its own.
    if (name == strategy_name(Strategy::ScaleIn)) return Strategy::ScaleIn;
    if (name == strategy_name(Strategy::ScaleOut)) return Strategy::ScaleOut;
    if (name == strategy_name(Strategy::HotSwitch)) return Strategy::HotSwitch;
    auto s = parse_strategy(name);
    if (!s) throw py::value_error("unknown strategy '" + name + "'");
    return *s;
}

Capabilities capabilities(bool retry, bool recover, bool elastic) {
    Capabilities caps;
    caps.retry = retry;
    caps.recover = recover;
    caps.elastic = elastic;
    return caps;
}

py::dict context_dict(const FaultContext& ctx) {
    py::dict d;
    d["repair_step"] = ctx.repair_step;
    d["reload_step"] = ctx.reload_step;
    d["is_uce"] = ctx.is_uce;
    d["dead"] = ctx.dead;
    d["not_ready"] = ctx.not_ready;
    d["repair_set"] = ctx.repair_set;
    d["replace"] = ctx.replace;
    d["unavailable"] = ctx.unavailable;
    return d;
}

py::dict savers_dict(const SaverPlan& plan) {
    py::dict d;
    for (const auto& [type, ranks] : plan.ranks_by_type()) d[py::int_(type)] = std::vector<int>(ranks.begin(), ranks.end());
    return d;
}

py::tuple repair_tuple(const RepairInfoMsg& r) {
    return py::make_tuple(r.optimizer_type, r.repair_type, r.src, r.dst, r.rank_list);
}

py::dict step_dict(const FlowStep& step) {
    py::dict d;
    d["op"] = flow_op_name(step.op);
    if (step.op != FlowOp::Act) return d;
    d["action"] = action_name(step.action);
    d["failure"] = step.failure;
    d["targets"] = flow_targets_name(step.targets);
    d["interruptible"] = step.interruptible;
    d["skip_if_none"] = step.skip_if_none;
    d["unless_stopped"] = step.unless_stopped;
    d["names_failed"] = step.names_failed;
    return d;
}

py::dict flow_dict(const Flow& flow) {
    py::dict d;
    d["strategy"] = strategy_name(flow.strategy);
    d["result"] = flow.result;
    d["replaces"] = flow.replaces;
    d["may_reload"] = flow.may_reload;
    d["relayouts"] = flow.relayouts;
    d["hands_over"] = flow.hands_over;
    d["fallback"] = strategy_name(flow.fallback);
    py::list steps;
    for (const FlowStep& step : flow.steps) steps.append(step_dict(step));
    d["steps"] = steps;
    return d;
}

py::dict plan_dict(const Plan& p, const Capabilities& caps, const std::optional<std::string>& policy) {
    py::dict d = context_dict(p.ctx);
    d["strategy"] = strategy_name(p.strategy);
    d["why"] = p.why;
    d["exit_reason"] = exit_reason(p);
    d["repairable"] = p.input.repairable;
    d["dump_possible"] = p.input.dump_possible;
    d["reload_possible"] = p.input.reload_possible;
    d["reloadable_step"] = p.reloadable_step;
    d["savers"] = savers_dict(p.savers);
    py::list missing;
    for (const auto& s : p.savers.missing) missing.append(py::make_tuple(s.optimizer_type, s.group_index, s.shard));
    d["missing"] = missing;
    Strategy chosen = policy ? combine_with_policy(caps, p.input, p.strategy, strategy(*policy)) : p.strategy;
    d["chosen"] = strategy_name(chosen);
    d["cluster_offer"] = cluster_offer(p, caps, chosen);
    return d;
}

}  // namespace

void bind_planner(py::module_& m) {
    py::dict repair_types;
    const std::pair<const char*, RepairType> names[] = {
        {"SEND", RepairType::Send},          {"UCE_HIGHLEVEL", RepairType::UceHighLevel},
        {"UCE_LOWLEVEL", RepairType::UceLowLevel}, {"RECV_REPAIR", RepairType::RecvRepair},
        {"ROLLBACK", RepairType::Rollback},  {"LOAD_CKPT", RepairType::LoadCkpt},
        {"LOAD_REBUILD", RepairType::LoadRebuild}};
    for (const auto& [name, type] : names) repair_types[name] = static_cast<int>(type);
    m.attr("REPAIR_TYPES") = repair_types;

    m.def("plan_fault", [](const py::list& ranks, const std::map<int, std::string>& faults, const Layout& layout,
                           bool retry, bool recover, int64_t lock_step, std::optional<std::string> policy,
                           bool elastic) {
        Capabilities caps = capabilities(retry, recover, elastic);
        Plan p = plan_fault(snapshots(ranks), replicas(layout), caps, faults_of(faults), lock_step);
        return plan_dict(p, caps, policy);
    }, py::arg("ranks"), py::arg("faults"), py::arg("layout") = Layout{}, py::arg("retry") = true,
       py::arg("recover") = false, py::arg("lock_step") = -1, py::arg("policy") = py::none(),
       py::arg("elastic") = false,
       "The controller's decision: the fault context, the built-in strategy, its reasons, the savers; "
       "'chosen' after a policy's answer and 'cluster_offer' for that choice.");

    m.def("plan_prelock", [](const py::list& ranks, const std::set<int>& faulty, const Layout& layout) {
        RankSnapshots snap = snapshots(ranks);
        PrelockPlan p = plan_prelock(snap, replicas(layout), faulty);
        py::dict d;
        d["live"] = p.live;
        d["step"] = p.step;
        d["blocked"] = p.blocked;
        d["level"] = p.level;
        d["laggards"] = prelock_laggards(snap, p, faulty);
        return d;
    }, py::arg("ranks"), py::arg("faulty"), py::arg("layout") = Layout{},
       "The PRELOCK step, the ranks not waited for, whether nobody needs waiting for, and who is behind.");

    m.def("prelock_laggards", [](const py::list& ranks, const std::set<int>& live, int64_t step,
                                 const std::set<int>& blocked, const std::set<int>& faulty) {
        PrelockPlan p;
        p.live = live;
        p.step = step;
        p.blocked = blocked;
        return prelock_laggards(snapshots(ranks), p, faulty);
    }, py::arg("ranks"), py::arg("live"), py::arg("step"), py::arg("blocked"), py::arg("faulty"),
       "Who the lock still waits for, on a later snapshot of the ranks.");

    m.def("plan_repair", [](const py::list& ranks, const std::map<int, std::string>& faults, const Layout& layout,
                            const std::map<int, int>& clean_results, int64_t lock_step, bool escalated) {
        FaultContext ctx = assess(snapshots(ranks), faults_of(faults), lock_step);
        if (escalated) replace_faulty(ctx);
        RepairAssignment a = plan_repair(replicas(layout).repair_pairs(ctx.unavailable), ctx, clean_results);
        py::list by_type;
        for (const auto& info : a.by_type) by_type.append(py::make_tuple(info.optimizer_type, info.src, info.dst, info.rank_list));
        py::dict by_rank;
        for (const auto& [rank, infos] : a.by_rank) {
            py::list mine;
            for (const auto& info : infos) mine.append(repair_tuple(info));
            by_rank[py::int_(rank)] = mine;
        }
        py::dict d = context_dict(ctx);
        d["by_type"] = by_type;
        d["by_rank"] = by_rank;
        return d;
    }, py::arg("ranks"), py::arg("faults"), py::arg("layout"), py::arg("clean_results") = std::map<int, int>{},
       py::arg("lock_step") = -1, py::arg("escalated") = false,
       "The REPAIR of a fault context: by_type [(type, src, dst, rank_list)], by_rank {rank: [(type, repair_type, "
       "src, dst, rank_list)]}; escalated: a policy turned the faults into replacements (replace_faulty).");

    m.def("flow_table", [](const std::string& name) {
        try {
            return flow_dict(flow_for(strategy(name)));
        } catch (const std::invalid_argument& e) {
            throw py::value_error(e.what());
        }
    }, py::arg("strategy"),
       "A read-only view of the flow of 'retry', 'recover', 'dump', 'scale_in', 'scale_out' or 'hot_switch' (flows.h): its steps (op; for an action "
       "its name, failure reason, targets and flags) and its fallback.");

    m.attr("COINCIDENT_REPORTS_MS") = kCoincidentReportsMs;
    m.def("collection_can_close", [](const py::list& ranks, const std::map<int, std::string>& faults, int64_t open_ms,
                                     bool connection_losses_pending, bool policy_set) {
        return collection_can_close(snapshots(ranks), faults_of(faults), open_ms, connection_losses_pending,
                                    policy_set);
    }, py::arg("ranks"), py::arg("faults"), py::arg("open_ms"), py::arg("connection_losses_pending") = false,
       py::arg("policy_set") = false,
       "The rule by which the fault-collection window closes before its time, or None while it stays open.");

    m.def("reload_info", [](const std::set<int>& ranks) { return repair_tuple(reload_info(ranks)); });

    m.def("plan_dump", [](const py::list& ranks, const Layout& layout, std::set<int> unavailable,
                          const std::map<int, std::string>& pending) {
        ReplicaManager layout_ = replicas(layout);
        exclude_untrusted_savers(snapshots(ranks), faults_of(pending), unavailable);
        SaverPlan plan = layout_.savers(unavailable);
        py::dict d;
        d["unavailable"] = unavailable;
        d["savers"] = savers_dict(plan);
        d["refusal"] = dump_refusal(layout_, plan);
        return d;
    }, py::arg("ranks"), py::arg("layout"), py::arg("unavailable") = std::set<int>{},
       py::arg("pending") = std::map<int, std::string>{},
       "The savers of a dump decided earlier (`unavailable` as the decision left it), faults reported since in "
       "`pending`; 'refusal' says why no dump is possible, empty when it is.");
}
