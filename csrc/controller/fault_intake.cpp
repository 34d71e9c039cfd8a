#include "controller/fault_intake.h"

#include "common/log.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";
constexpr size_t kMaxCodedReports = 16;  // per rank and fault handling

}  // namespace

bool FaultIntake::add(int rank, FaultKind kind, const std::string& why, const CodedReport* coded, bool job_ending) {
    if (job_ending) return false;
    const std::string detail = "rank " + std::to_string(rank) + " " + fault_kind_name(kind) + ": " + why;
    if (completed() && !flow_active_) {
        events_.note("late_fault", detail);
        LOG_WARN(kLog, log_rank_, "fault after the job completed (rank " << finished_rank_ << " finished training), "
                                                                         "not acted on: " << detail);
        return false;
    }
    events_.note("fault", detail);
    LOG_WARN(kLog, log_rank_, "fault on rank " << rank << " (" << fault_kind_name(kind) << "): " << why);
    if (flow_active_ && kind == FaultKind::Comm) return false;  // the expected fallout of stopping the others
    auto [it, fresh] = pending_.try_emplace(rank, Fault{kind, why, {}});
    if (!fresh && static_cast<int>(kind) > static_cast<int>(it->second.kind)) {
        it->second.kind = kind;
        it->second.why = why;
    }
    // Every coded report goes to the policy (its frequency rules count occurrences); the bound keeps
    // a rank that reports in a loop from growing the list without limit.
    if (coded && it->second.coded.size() < kMaxCodedReports) it->second.coded.push_back(*coded);
    if (flow_active_) second_fault_ = true;
    return true;
}

std::set<int> FaultIntake::faulty(const Faults& faults) const {
    std::set<int> ranks;
    for (const auto& entry : faults) ranks.insert(entry.first);
    for (const auto& entry : pending_) ranks.insert(entry.first);
    return ranks;
}

Faults FaultIntake::take() {
    Faults faults = std::move(pending_);
    pending_.clear();
    second_fault_ = false;
    return faults;
}

void FaultIntake::take_into(Faults& faults) {
    for (auto& [rank, f] : pending_) faults.try_emplace(rank, std::move(f));
    pending_.clear();
    second_fault_ = false;
}

bool FaultIntake::note_finished(int rank) {
    if (completed()) return false;
    finished_rank_ = rank;
    return true;
}

}  // namespace mindio
