#include "controller/consultation.h"

#include <condition_variable>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>

namespace mindio {
namespace {

// Answers of one consultation, shared with the helper thread, which may outlive the wait (a hung
// callback): it owns copies of everything it touches, never the caller's.
struct PolicyBatch {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<std::string, std::string>> answers;  // (strategy, error) per query, in order
};

void run_policy_queries(const PolicyCallback& cb, const std::vector<PolicyQuery>& queries,
                        const std::shared_ptr<PolicyBatch>& batch) {
    for (const auto& q : queries) {
        std::pair<std::string, std::string> answer;
        try {
            answer.first = cb(q.rank, q.state, q.code);
        } catch (const std::exception& e) {
            answer.second = e.what();
        } catch (...) {
            answer.second = "unknown exception";
        }
        std::lock_guard<std::mutex> lock(batch->mu);
        batch->answers.push_back(std::move(answer));
        batch->cv.notify_all();
    }
}

PolicyAnswer judge_answer(const std::pair<std::string, std::string>* raw, int timeout_ms) {
    PolicyAnswer a;
    if (!raw) {
        a.error = "no answer within " + std::to_string(timeout_ms) + " ms";
    } else if (!raw->second.empty()) {
        a.error = raw->second;
    } else if (!(a.strategy = parse_strategy(raw->first))) {
        a.error = "answered '" + raw->first.substr(0, 64) + "', not one of none, retry, recover, dump, exit";
    }
    return a;
}

}  // namespace

void check_policy_timeout(int timeout_ms) {
    if (timeout_ms < kMinPolicyTimeoutMs || timeout_ms > kMaxPolicyTimeoutMs) {
        throw std::invalid_argument("policy timeout " + std::to_string(timeout_ms) + " ms is out of range " +
                                    std::to_string(kMinPolicyTimeoutMs) + ".." + std::to_string(kMaxPolicyTimeoutMs));
    }
}

std::vector<PolicyQuery> policy_queries(const Faults& faults) {
    std::vector<PolicyQuery> queries;
    for (const auto& [rank, f] : faults) {
        for (const auto& c : f.coded) queries.push_back({rank, c.state, c.code});
    }
    return queries;
}

std::vector<PolicyAnswer> ask_policy(const PolicyCallback& cb, const std::vector<PolicyQuery>& queries, int timeout_ms) {
    auto batch = std::make_shared<PolicyBatch>();
    std::thread(run_policy_queries, cb, queries, batch).detach();
    std::vector<std::pair<std::string, std::string>> raw;
    {
        std::unique_lock<std::mutex> lock(batch->mu);
        batch->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return batch->answers.size() == queries.size(); });
        raw = batch->answers;
    }
    std::vector<PolicyAnswer> answers;
    for (size_t i = 0; i < queries.size(); ++i) answers.push_back(judge_answer(i < raw.size() ? &raw[i] : nullptr, timeout_ms));
    return answers;
}

std::optional<Strategy> most_drastic(const std::vector<PolicyAnswer>& answers) {
    std::optional<Strategy> most;
    for (const auto& a : answers) {
        if (a.strategy && (!most || static_cast<int>(*a.strategy) > static_cast<int>(*most))) most = a.strategy;
    }
    return most;
}

int cluster_fault_code(FaultKind kind) {
    switch (kind) {
        case FaultKind::Memory: return 0;
        case FaultKind::Comm: return 2;
        default: return 1;
    }
}

FaultKind fault_kind_of_cluster_code(int code) {
    return code == 0 ? FaultKind::Memory : code == 2 ? FaultKind::Comm : FaultKind::Node;
}

std::map<int, int> cluster_fault_ranks(const Faults& faults) {
    std::map<int, int> out;
    for (const auto& [rank, f] : faults) out[rank] = cluster_fault_code(f.kind);
    return out;
}

void check_cluster_faults(const std::map<int, int>& fault_ranks, int world_size) {
    for (const auto& [rank, code] : fault_ranks) {
        if (rank < 0 || rank >= world_size) {
            throw std::invalid_argument("fault rank " + std::to_string(rank) + " is out of range");
        }
        if (code < 0 || code > 2) {
            throw std::invalid_argument("fault type " + std::to_string(code) +
                                        " of rank " + std::to_string(rank) + " is not 0 (memory), 1 (node) or 2 (communication)");
        }
    }
}

void ClusterCallbacks::set(const std::string& action, ClusterCallback cb) {
    static const std::set<std::string> known = {"report_fault_ranks", "report_stop_complete", "report_strategies",
                                                "report_result"};
    if (!known.count(action)) {
        throw std::invalid_argument("unknown cluster-manager callback '" + action +
                                    "' (known: report_fault_ranks, report_stop_complete, report_strategies, report_result)");
    }
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_[action] = std::move(cb);
}

bool ClusterCallbacks::empty() const {
    std::lock_guard<std::mutex> lock(mu_);
    return callbacks_.empty();
}

bool ClusterCallbacks::has(const std::string& action) const {
    std::lock_guard<std::mutex> lock(mu_);
    return callbacks_.count(action) > 0;
}

std::optional<std::string> ClusterCallbacks::report(const ClusterReport& given) {
    ClusterCallback cb;
    ClusterReport report = given;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (report.action == "report_fault_ranks") last_faults_ = report.fault_ranks;
        if (report.fault_ranks.empty()) report.fault_ranks = last_faults_;
        auto it = callbacks_.find(report.action);
        if (it == callbacks_.end()) return std::nullopt;
        cb = it->second;
    }
    try {
        cb(report);
    } catch (const std::exception& e) {
        return std::string(e.what());
    }
    return std::nullopt;
}

}  // namespace mindio
