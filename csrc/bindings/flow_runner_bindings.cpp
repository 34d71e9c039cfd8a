// The flow runner (controller/flow_runner.h) over a scripted host, for its unit tests: every call the runner
// makes of its host is recorded as a line, and the host fails where the test says. The host is the smallest
// that carries a flow: the targets are the live ranks less those being replaced, the savers the first target.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common/text.h"
#include "controller/flow_runner.h"

namespace py = pybind11;
using namespace mindio;

namespace {

class ScriptedHost : public FlowHost {
public:
    std::vector<std::string> calls;
    std::map<std::string, std::string> failing;  // a host step or an action's name -> why it fails
    std::set<int> live, leavers, repaired;  // repaired: the ranks a repair from peers sends to, besides ctx.replace
    int lease_checks = -1;  // how many times the lease holds; -1: always

    bool lease_holds() override {
        if (lease_checks == 0) {
            note("lease lost");
            return false;
        }
        if (lease_checks > 0) --lease_checks;
        return true;
    }
    ActionOutcome act(ActionKind kind, const ActionGroups& groups, bool) override {
        std::set<int> targets;
        bool reload = false;
        std::set<int> absent;
        for (const auto& [ranks, msg] : groups) {
            targets.insert(ranks.begin(), ranks.end());
            reload |= !msg.repair.empty() && msg.repair[0].repair_type == static_cast<uint8_t>(RepairType::LoadCkpt);
            absent.insert(msg.absent_ranks.begin(), msg.absent_ranks.end());
        }
        note(std::string("act ") + action_name(kind) + " " + list_text(targets) + (reload ? " load_ckpt" : "") +
             (absent.empty() ? "" : " absent " + list_text(absent)));
        ActionOutcome out;
        for (int r : targets) out.results[r] = kind == ActionKind::RebuildGroup && leavers.count(r) ? kLeavesTheJob : 0;
        if (failing.count(action_name(kind)) && !targets.empty()) out.failed.insert(*targets.begin());
        return out;
    }
    void begin(const Flow& flow, FaultContext& ctx, FlowRun& run) override {
        note("begin");
        run.targets = live;
        if (flow.replaces && !flow.hands_over) {
            for (int r : ctx.replace) run.targets.erase(r);
        }
    }
    void begin_dump(FlowRun& run) override {
        note("begin_dump: " + run.reason);
        run.targets = live;
    }
    void begin_scale_in(FaultContext& ctx, FlowRun& run) override {
        note("begin_scale_in: " + run.reason);
        ctx.reload_step = ctx.repair_step;
        run.targets = live;
        for (int r : ctx.replace) run.targets.erase(r);
    }
    std::string pick_savers(FaultContext&, FlowRun& run) override {
        if (auto why = fails("pick_savers"); !why.empty()) return why;
        run.savers = {*run.targets.begin()};
        return "";
    }
    void take_offline(const std::set<int>& ranks) override { note("take_offline " + list_text(ranks)); }
    std::string await_replacements(const std::set<int>& ranks) override {
        note("await_replacements " + list_text(ranks));
        return failing.count("await_replacements") ? failing["await_replacements"] : "";
    }
    void enter_repair(const std::string&) override { note("enter_repair"); }
    void finish(const Flow&, const FaultContext&) override { note("finish"); }
    void exit_all(const std::string& why, int result) override { note("exit_all " + std::to_string(result) + ": " + why); }
    void retire(const std::set<int>& ranks, Leaving why) override {
        note("retire " + list_text(ranks) + (why == Leaving::WithSlice ? " with their slices" : ""));
    }
    void return_retired(const std::set<int>& ranks) override { note("return_retired " + list_text(ranks)); }
    std::string hand_over(const FaultContext& ctx, FlowRun& run) override {
        for (int r : ctx.replace) run.targets.erase(r);
        return fails("hand_over");
    }
    void report_cluster(const ClusterReport& report) override { note("report " + report.action); }
    ActionGroups repair_messages(const FaultContext& ctx, Strategy s, const std::map<int, int>&) override {
        std::set<int> ranks = repaired;
        ranks.insert(ctx.replace.begin(), ctx.replace.end());
        if (ranks.empty()) return {};
        return {{ranks, base_action(ActionKind::Repair, ctx, s)}};
    }
    void begin_relayout() override { note("begin_relayout"); }
    void end_relayout(const std::set<int>& reporters, bool ok) override {
        note("end_relayout " + list_text(reporters) + (ok ? " ok" : " failed"));
    }
    void running(const std::set<int>& ranks) override { note("running " + list_text(ranks)); }

private:
    void note(const std::string& call) { calls.push_back(call); }
    std::string fails(const std::string& step) {
        note(step);
        auto it = failing.find(step);
        return it == failing.end() ? "" : it->second;
    }
};

Strategy strategy_named(const std::string& name) {
    for (Strategy s : {Strategy::Retry, Strategy::Recover, Strategy::Dump, Strategy::ScaleIn, Strategy::ScaleOut,
                       Strategy::HotSwitch}) {
        if (name == strategy_name(s)) return s;
    }
    throw py::value_error("no flow for strategy '" + name + "'");
}

}  // namespace

void bind_flow_runner(py::module_& m) {
    m.def("run_flow_script", [](const std::string& strategy, bool elastic, const std::set<int>& live,
                                const std::set<int>& replace, const std::map<std::string, std::string>& fail,
                                const std::set<int>& leavers, const std::set<int>& repaired, int lease_checks,
                                int64_t repair_step, int64_t reload_step, const std::set<int>& absent) {
        ScriptedHost host;
        host.live = live;
        host.failing = fail;
        host.leavers = leavers;
        host.repaired = repaired;
        host.lease_checks = lease_checks;
        FaultContext ctx;
        ctx.replace = replace;
        ctx.absent = absent;
        ctx.repair_step = repair_step;
        ctx.reload_step = reload_step;
        FlowRunner(host, elastic).run(flow_for(strategy_named(strategy)), ctx);
        return host.calls;
    }, py::arg("strategy"), py::arg("elastic") = false, py::arg("live") = std::set<int>{0, 1, 2, 3},
       py::arg("replace") = std::set<int>{}, py::arg("fail") = std::map<std::string, std::string>{},
       py::arg("leavers") = std::set<int>{}, py::arg("repaired") = std::set<int>{}, py::arg("lease_checks") = -1,
       py::arg("repair_step") = 4, py::arg("reload_step") = -1, py::arg("absent") = std::set<int>{},
       "Runs the flow of `strategy` over a scripted host and returns the calls it made, in order. `fail`: a host "
       "step (pick_savers, await_replacements, hand_over) or an action (stop, clean, rebuild_group, repair, ...) "
       "that fails, with why; `leavers`: ranks that answer REBUILD_GROUP that they leave the job; `repaired`: the "
       "ranks a repair from peers goes to (with the replaced ones); the lease holds for `lease_checks` checks (-1: "
       "always); `absent`: a partial scale-out's retired ranks that stay out.");
}
