// The loop that runs a recovery flow (flows.h): its steps in order, each action's message and targets, and
// on the first step that fails the flow's fallback (the dump, the exit, or with elastic training the
// scale-in when a replacement never came). What a step does to the job (sending the action and waiting for
// the replies, states, the rank table, the replica layout, the cluster manager) is the host's: the runner
// sees nothing else of the controller, so its unit test drives it with a scripted host
// (tests/unit/test_flow_runner.py). Runs on the state-machine thread without the controller's lock.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "controller/action_engine.h"  // ActionGroups, ActionOutcome
#include "controller/consultation.h"
#include "controller/flows.h"

namespace mindio {

// What a flow carries from step to step.
struct FlowRun {
    std::string reason;  // why the flow was started (the dump's)
    std::set<int> targets;
    std::map<int, int> clean_results;  // the CLEAN replies, which the repair plan reads
    std::set<int> savers;               // the dump's, by PickSavers
    std::vector<SaveInfoMsg> save;      // what SAVE_CKPT tells them
};

// Why ranks retire: lost and not replaced (a scale-in); live ranks leaving with the data-parallel slice that
// lost a rank (a scale-in); or returned ranks leaving again, their slice incomplete (a partial scale-out).
enum class Leaving { Lost, WithSlice, Again };

// The controller's side of a flow's steps (FlowOp): each named after the step it carries out.
class FlowHost {
public:
    virtual ~FlowHost() = default;
    virtual bool lease_holds() = 0;  // false: this controller stood down (or stops): the flow ends
    // Sends the action and waits for every target's reply, death or deadline (the action engine's run).
    virtual ActionOutcome act(ActionKind kind, const ActionGroups& groups, bool interruptible) = 0;
    virtual void begin(const Flow& flow, FaultContext& ctx, FlowRun& run) = 0;
    virtual void begin_dump(FlowRun& run) = 0;
    virtual void begin_scale_in(FaultContext& ctx, FlowRun& run) = 0;
    virtual std::string pick_savers(FaultContext& ctx, FlowRun& run) = 0;  // why no dump is possible, or ""
    virtual void take_offline(const std::set<int>& ranks) = 0;
    virtual std::string await_replacements(const std::set<int>& ranks) = 0;  // why they did not come, or ""
    virtual void enter_repair(const std::string& why) = 0;
    virtual void finish(const Flow& flow, const FaultContext& ctx) = 0;
    virtual void exit_all(const std::string& why, int result) = 0;
    // Ranks that leave the job for good (`why`: Leaving).
    virtual void retire(const std::set<int>& ranks, Leaving why) = 0;
    virtual void return_retired(const std::set<int>& ranks) = 0;
    virtual std::string hand_over(const FaultContext& ctx, FlowRun& run) = 0;
    virtual void report_cluster(const ClusterReport& report) = 0;
    // The REPAIR of each rank taking part, from the replica layout and the CLEAN replies.
    virtual ActionGroups repair_messages(const FaultContext& ctx, Strategy s, const std::map<int, int>& clean_results) = 0;
    // A REBUILD_GROUP that changes the data-parallel size: the layout is forgotten before it, and the
    // ranks' reports while it runs make the new one; `reporters`: the ranks that must have reported.
    virtual void begin_relayout() = 0;
    virtual void end_relayout(const std::set<int>& reporters, bool ok) = 0;
    virtual void running(const std::set<int>& ranks) = 0;  // NORMAL took them back to training
};

class FlowRunner {
public:
    FlowRunner(FlowHost& host, bool elastic) : host_(host), elastic_(elastic) {}

    // reason: why the flow runs; the dump states it, the recoveries give their own (Flow::begin_why).
    void run(const Flow& flow, FaultContext& ctx, const std::string& reason = "");

private:
    std::string run_step(const Flow& flow, const FlowStep& step, FaultContext& ctx, FlowRun& run);
    std::string act(const Flow& flow, const FlowStep& step, FaultContext& ctx, FlowRun& run);
    ActionOutcome rebuild_groups(const Flow& flow, const FlowStep& step, const FaultContext& ctx, ActionMsg msg,
                                 const FlowRun& run);
    std::string retire_leavers(const Flow& flow, const ActionOutcome& out, FaultContext& ctx, FlowRun& run);
    bool scales_in_instead(const Flow& flow, const FlowStep& failed) const;
    static std::set<int> step_targets(const FlowStep& step, const FlowRun& run);

    FlowHost& host_;
    const bool elastic_;
};

}  // namespace mindio
