// The controller's states, the transitions it may take, and the pure decision that picks a strategy
// from what went wrong. Kept free of I/O so the unit tests can walk the whole table.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "protocol/messages.h"

namespace mindio {

// The reference's states. STEP_FINISH, MIGRATION, DG_REPAIR, DOWNGRADE and UPGRADE exist for
// compatibility of names; no transition leads into them yet (elastic training is not implemented).
enum class State : uint8_t {
    Init, Normal, Pause, StepFinish, Migration, Abnormal, EnvClear, Repair, DgRepair, Downgrade, Upgrade,
    Dump, Exit, Final,
};
constexpr int kNumStates = 14;
const char* state_name(State s);
bool transition_allowed(State from, State to);
// The job is ending (its dump, its exit, the controller shut down): no process joins it any more.
bool ends_the_job(State s);
std::vector<std::pair<State, State>> transition_table();


enum class FaultKind : uint8_t { Memory = 0, Comm = 1, Node = 2, Unknown = 3 };
const char* fault_kind_name(FaultKind k);
// The fault a report stands for, or nothing when the report is not a fault (NORMAL: stopped on purpose;
// INIT_FINISH, PREREPAIR_FINISH, STEP_FINISH: progress).
std::optional<FaultKind> fault_kind_of(ReportState state);

struct Capabilities {
    bool retry = true;   // online repair of memory / communication errors (UCE)
    bool recover = false;  // ARF: replace the failed process
    bool elastic = false;  // elastic training: a replacement that never came scales the job in (no dump)
};

struct DecisionInput {
    std::set<FaultKind> kinds;
    bool during_repair = false;  // a fault arrived while a repair flow ran
    bool repairable = false;     // every rank to repair has a healthy replica peer
    bool dump_possible = false;  // every shard has an available saver at the repair step
    bool reload_possible = false;  // every rank can load the same periodic checkpoint again (LOAD_CKPT)
};

Strategy decide(const Capabilities& caps, const DecisionInput& in);

// Whether `s` can be carried out now. None never handles a reported fault; Exit always can.
bool strategy_feasible(Strategy s, const Capabilities& caps, const DecisionInput& in);

// The built-in decision combined with what a fault policy asked for. Strategies are ordered by how
// drastic they are (none < retry < recover < dump < exit, the enum's order). The policy may only
// make the handling more drastic: an answer at or below `builtin` changes nothing, because the
// built-in rules know what the processes can still do (a dead process cannot be retried). A more
// drastic answer is taken if feasible, else the next more drastic feasible one (recover -> dump ->
// exit): falling back to something milder would ignore the policy's reason for escalating.
Strategy combine_with_policy(const Capabilities& caps, const DecisionInput& in, Strategy builtin, Strategy asked);

// The strategy called `name` ("none", "retry", "recover", "dump", "exit"), or nothing.
std::optional<Strategy> parse_strategy(const std::string& name);

}  // namespace mindio
