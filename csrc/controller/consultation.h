// What the controller asks outside itself after a fault: a fault policy (a callback that may escalate
// the decision) and the cluster manager ("MindX": told the faults and the flow's progress, and offered
// the strategies to pick from). Kept apart from the controller's state: the controller decides when
// to ask and what the answers change (controller_consultation.cpp).
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "controller/planner.h"

namespace mindio {

// Calls towards the cluster manager: action is report_fault_ranks, report_stop_complete,
// report_strategies or report_result. Called from the state-machine thread.
struct ClusterReport {
    std::string action;
    std::map<int, int> fault_ranks;  // rank -> 0 memory, 1 process/node, 2 communication
    std::vector<std::string> strategies;
    int result = 0;
    std::string strategy;
};
using ClusterCallback = std::function<void(const ClusterReport&)>;

// A fault policy: (rank, report state, error code) -> a strategy name (none, retry, recover, dump,
// exit). Opaque to the controller, which only knows that the answer may escalate its own decision
// (combine_with_policy). It may throw; it is called on a helper thread and waited for a bounded time.
using PolicyCallback = std::function<std::string(int rank, int report_state, const std::string& code)>;
constexpr int kMinPolicyTimeoutMs = 10;
constexpr int kMaxPolicyTimeoutMs = 600000;

// ---- the fault policy -------------------------------------------------------------------------

// Throws std::invalid_argument when a consultation may not take `timeout_ms`.
void check_policy_timeout(int timeout_ms);

struct PolicyQuery {
    int rank;
    uint8_t state;
    std::string code;
};
struct PolicyAnswer {
    std::optional<Strategy> strategy;  // empty: no usable answer, `error` says why
    std::string error;
};
// One query per coded report of every faulty rank, in rank order.
std::vector<PolicyQuery> policy_queries(const Faults& faults);
// Asks `cb` every query on a helper thread, so that a callback stuck in Python costs the caller
// `timeout_ms`, not the job; a query not answered by then has an error answer.
std::vector<PolicyAnswer> ask_policy(const PolicyCallback& cb, const std::vector<PolicyQuery>& queries, int timeout_ms);
// The most drastic strategy among the answers, or nothing when none is usable.
std::optional<Strategy> most_drastic(const std::vector<PolicyAnswer>& answers);

// ---- the cluster manager ----------------------------------------------------------------------

// The cluster manager's fault types (0 memory, 1 process/node, 2 communication) and ours.
int cluster_fault_code(FaultKind kind);
FaultKind fault_kind_of_cluster_code(int code);
std::map<int, int> cluster_fault_ranks(const Faults& faults);
// Throws std::invalid_argument naming the first rank out of 0..world_size-1 or the first unknown type.
void check_cluster_faults(const std::map<int, int>& fault_ranks, int world_size);

// The callbacks the cluster manager registered, by action. Thread-safe; a callback is called
// without the registry's lock held.
class ClusterCallbacks {
public:
    // Throws std::invalid_argument for an action that is not one of the four.
    void set(const std::string& action, ClusterCallback cb);
    bool empty() const;
    bool has(const std::string& action) const;
    // Calls the callback of `report.action`, if any. A report without fault ranks carries those of
    // the last report_fault_ranks. Returns the callback's error, nothing when it returned normally.
    std::optional<std::string> report(const ClusterReport& report);

private:
    mutable std::mutex mu_;
    std::map<std::string, ClusterCallback> callbacks_;
    std::map<int, int> last_faults_;
};

}  // namespace mindio
