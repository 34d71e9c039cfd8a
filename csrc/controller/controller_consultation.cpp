// The controller's side of its consultations (controller/consultation.h): when it asks the fault
// policy and the cluster manager, what it records of their answers, and the cluster manager's calls
// into the controller (tft_notify_controller_*).
#include <algorithm>

#include "common/log.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

// ---- the fault policy --------------------------------------------------------------------------

void Controller::set_policy(PolicyCallback cb, int timeout_ms) {
    check_policy_timeout(timeout_ms);
    std::lock_guard<std::mutex> lock(mu_);
    policy_ = std::move(cb);
    policy_timeout_ms_ = timeout_ms;
}

std::optional<Strategy> Controller::consult_policy(const FaultContext& ctx) {
    PolicyCallback cb;
    int timeout_ms;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!policy_) return std::nullopt;
        cb = policy_;
        timeout_ms = policy_timeout_ms_;
    }
    std::vector<PolicyQuery> queries = policy_queries(ctx.faults);
    if (queries.empty()) return std::nullopt;
    std::vector<PolicyAnswer> answers = ask_policy(cb, queries, timeout_ms);
    for (size_t i = 0; i < queries.size(); ++i) {
        note_policy_answer(queries[i].rank, queries[i].code, answers[i].strategy, answers[i].error);
    }
    return most_drastic(answers);
}

void Controller::note_policy_answer(int rank, const std::string& code, std::optional<Strategy> s, const std::string& error) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string about = "rank " + std::to_string(rank) + " code " + code;
    if (s) {
        event_locked("policy", about + " -> " + strategy_name(*s));
        return;
    }
    event_locked("policy_error", about + ": " + error);
    LOG_ERROR(kLog, cfg_.rank, "fault policy failed for " << about << ": " << error << "; using the built-in decision");
}

// ---- the cluster manager -----------------------------------------------------------------------

Strategy Controller::consult_cluster(const FaultContext& ctx, Strategy own, const std::vector<std::string>& offered) {
    ClusterReport faults{"report_fault_ranks"};
    faults.fault_ranks = cluster_fault_ranks(ctx.faults);
    report_cluster(faults);
    std::unique_lock<std::mutex> lock(mu_);
    if (!cluster_.has("report_strategies")) return own;
    ClusterReport offer{"report_strategies"};
    offer.strategies = offered;
    requests_.strategy.reset();
    lock.unlock();
    report_cluster(offer);
    lock.lock();
    auto until = Clock::now() + std::chrono::milliseconds(cfg_.cluster_wait_ms);
    cv_.wait_until(lock, until, [&] { return stopping_ || requests_.strategy.has_value(); });
    if (!requests_.strategy) {
        LOG_WARN(kLog, cfg_.rank, "the cluster manager chose no strategy within " << cfg_.cluster_wait_ms
                                                                                  << " ms; using " << strategy_name(own));
        return own;
    }
    Strategy picked = *requests_.strategy;
    requests_.strategy.reset();
    std::string name = cluster_name(picked);
    if (std::find(offer.strategies.begin(), offer.strategies.end(), name) == offer.strategies.end()) {
        LOG_WARN(kLog, cfg_.rank, "the cluster manager chose '" << name << "', which is not possible now; using "
                                                                << strategy_name(own));
        return own;
    }
    event_locked("cluster_strategy", name);
    return picked;
}

void Controller::report_cluster(const ClusterReport& report) {
    if (auto error = cluster_.report(report)) {
        LOG_ERROR(kLog, cfg_.rank, "cluster-manager callback " << report.action << " failed: " << *error);
    }
}

void Controller::set_cluster_callback(const std::string& action, ClusterCallback cb) {
    cluster_.set(action, std::move(cb));
}

void Controller::notify_faults(const std::map<int, int>& fault_ranks) {
    std::lock_guard<std::mutex> lock(mu_);
    check_cluster_faults(fault_ranks, cfg_.world_size);
    for (const auto& [rank, code] : fault_ranks) {
        add_fault_locked(rank, fault_kind_of_cluster_code(code), "reported by the cluster manager");
    }
}

void Controller::notify_strategy(const std::string& strategy) {
    std::lock_guard<std::mutex> lock(mu_);
    if (strategy == "retry") requests_.strategy = Strategy::Retry;
    else if (strategy == "recover") requests_.strategy = Strategy::Recover;
    else if (strategy == "dump") requests_.strategy = Strategy::Dump;
    else if (strategy == cluster_name(Strategy::ScaleIn)) requests_.strategy = Strategy::ScaleIn;
    else if (strategy == "exit") requests_.strategy = Strategy::Exit;
    else if (strategy == "continue") requests_.resume = true;
    else throw std::invalid_argument("strategy '" + strategy + "' is not implemented by this controller");
    cv_.notify_all();
}

void Controller::notify_dump() {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.dump = true;
    cv_.notify_all();
}


}  // namespace mindio
