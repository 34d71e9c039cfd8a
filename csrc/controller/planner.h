// The controller's planning after a fault, as pure functions: from a snapshot of the ranks, the replica
// layout, the capabilities and the faults to what to do (strategy, repair step, repair set, savers,
// repair pairs or reload step, and the reasons the controller logs). No locks, no I/O, no clock: the
// controller copies what they read under its mutex, calls them, and carries the result out; the unit
// tests (tests/unit/test_controller_planner.py, through the bindings) call them case by case.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "controller/replica_manager.h"
#include "controller/state_machine.h"
#include "protocol/messages.h"

namespace mindio {

// What planning reads of a rank. The controller's rank table entry extends it, so that a snapshot
// is a plain copy of these fields.
struct RankSnapshot {
    bool registered = false, dead = false, excluded = false;
    bool joining = false;  // a replacement process (ARF) not yet repaired: kept out of the job
    bool left = false;     // said goodbye: gone on purpose
    int64_t step = -1;       // last completed optimizer step
    int64_t ckpt_step = -1;  // the last periodic checkpoint it saved
    DataStatus data = DataStatus::Updated;
    // Takes part in the job: gets actions, may save or serve as a repair source.
    bool live() const { return registered && !dead && !excluded && !joining && !left; }
};
using RankSnapshots = std::vector<RankSnapshot>;

struct CodedReport {
    uint8_t state;
    std::string code;
};
struct Fault {
    FaultKind kind;
    std::string why;
    std::vector<CodedReport> coded;  // reports of this rank that carried an error code (for the policy)
};
using Faults = std::map<int, Fault>;

// The faults being handled and what they leave of the job. A flow carries it from the decision to
// its last action.
struct FaultContext {
    Faults faults;
    std::set<int> dead, not_ready, repair_set, unavailable;
    std::set<int> replace;  // ranks with a process/node fault: replaced by a restarted process (ARF)
    std::set<int> absent;   // a partial scale-out: retired ranks that stay out (ActionMsg::absent_ranks)
    int64_t repair_step = -1;
    int64_t reload_step = -1;  // >= 0: no replica can repair; every rank reloads this checkpoint (LOAD_CKPT)
    bool is_uce = false;
    bool stopped = false;
};

std::set<int> live_ranks(const RankSnapshots& ranks);

// ---- PRELOCK: which step to lock, and whom to wait for ----------------------------------------

struct PrelockPlan {
    std::set<int> live;
    int64_t step = -1;     // the highest completed step of a live rank: the repair step
    std::set<int> blocked;  // never waited for: their update needs a faulty rank behind `step`
    bool level = true;      // every healthy rank completed `step` and none is mid-update: no wait
};

// The update peers (see ReplicaManager::update_peers) of each faulty rank behind `step` that are not
// faulty themselves.
std::set<int> blocked_by_faults(const RankSnapshots& ranks, const ReplicaManager& replicas,
                                const std::set<int>& faulty, int64_t step);
PrelockPlan plan_prelock(const RankSnapshots& ranks, const ReplicaManager& replicas, const std::set<int>& faulty);
// The ranks the lock still waits for: healthy, not blocked, behind the step.
std::set<int> prelock_laggards(const RankSnapshots& ranks, const PrelockPlan& plan, const std::set<int>& faulty);

// ---- the fault-collection window ---------------------------------------------------------------

// After the first fault the controller gathers related ones (MINDIO_FAULT_COLLECT_TIME) before it
// decides. The name of the rule by which it may decide at once, or nothing while a later fault could
// still change the decision: a lost connection not judged yet, a fault policy (it counts reports),
// and any fault but a lone memory error while some live rank has not reported. open_ms: how long the
// window has been open.
std::optional<std::string> collection_can_close(const RankSnapshots& ranks, const Faults& faults, int64_t open_ms,
                                                bool connection_losses_pending, bool policy_set);
// Reports of one event (several ranks hit at once) arrive within this of each other: a memory error
// is taken as lone only once the window has been open this long.
constexpr int64_t kCoincidentReportsMs = 100;

// ---- the decision -----------------------------------------------------------------------------

// The fault context of `faults` at `lock_step` (the PRELOCK step, or -1: the highest completed step
// of a live rank). A live rank mid-update or not at the repair step is not ready: repaired from a
// peer like a corrupted one, never a saver.
FaultContext assess(const RankSnapshots& ranks, Faults faults, int64_t lock_step = -1);

// The checkpoint step every live rank can load again, or -1: all ranks alive and registered, each
// having reported the same completed periodic checkpoint, not past the repair step.
int64_t reloadable_step(const RankSnapshots& ranks, const FaultContext& ctx);

struct Plan {
    FaultContext ctx;  // with reload_step set when no replica can repair
    DecisionInput input;
    Strategy strategy = Strategy::Exit;  // the built-in decision, before a policy or the cluster manager
    SaverPlan savers;                     // who would save a dump of the repair step
    int64_t reloadable_step = -1;
    std::string why;  // the decision's reasons, as logged
};
Plan plan_fault(const RankSnapshots& ranks, const ReplicaManager& replicas, const Capabilities& caps, Faults faults,
                int64_t lock_step);

// What the controller says when it ends the job with no recovery: the reasons, and when no dump is
// possible either, the shards no available rank holds.
std::string exit_reason(const Plan& plan);
std::string scale_in_refusal(const Plan& plan, bool elastic);
std::string missing_shards_text(const SaverPlan& plan);

// The strategies the cluster manager may pick from once `chosen` is decided (after a policy): not
// retry once the policy escalated, nor for a process/node fault; exit always.
std::vector<std::string> cluster_offer(const Plan& plan, const Capabilities& caps, Strategy chosen);
// Whether the cluster manager may choose the scale-in now (the reference's "downgrade"), and the names of
// the strategies on that link (the reference's: the scale-in is "downgrade").
bool scale_in_offerable(const Capabilities& caps, const DecisionInput& in);
const char* cluster_name(Strategy s);

// A fault policy escalated a memory or communication fault to replacement (a device to isolate): the
// faulty ranks' processes are replaced instead of repaired in place.
void replace_faulty(FaultContext& ctx);

// ---- the REPAIR action ------------------------------------------------------------------------

struct RepairAssignment {
    std::vector<RepairInfoMsg> by_type;                 // per optimizer type with pairs: src, dst, rank_list
    std::map<int, std::vector<RepairInfoMsg>> by_rank;  // what each taking part is sent, its repair_type set
};
// For each optimizer type, a healthy peer sends each shard to the rank of the repair set or the
// replacements that needs it. `pairs`: ReplicaManager::repair_pairs(ctx.unavailable); `clean_results`:
// the CLEAN replies (2: the memory error needs no rebuild).
RepairAssignment plan_repair(const std::map<int, RepairPlan>& pairs, const FaultContext& ctx,
                             const std::map<int, int>& clean_results);
// LOAD_CKPT for `ranks`: no sources, every rank loads the checkpoint of the repair step.
RepairInfoMsg reload_info(const std::set<int>& ranks);

// ---- the dump ---------------------------------------------------------------------------------

// Adds to `unavailable` what was learned since the decision: ranks that died, failed an action or
// are not (yet) part of the job, and ranks with a memory or process/node fault reported meanwhile
// (`pending`) are not trusted to save.
void exclude_untrusted_savers(const RankSnapshots& ranks, const Faults& pending, std::set<int>& unavailable);
// Empty when `savers` (ReplicaManager::savers of the unavailable ranks) saves every shard; otherwise
// why no dump is possible, as the controller ends the job with it.
std::string dump_refusal(const ReplicaManager& replicas, const SaverPlan& savers);

}  // namespace mindio
