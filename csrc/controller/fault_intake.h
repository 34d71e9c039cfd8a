// The controller's fault intake: the faults reported and not yet handled, whether a recovery flow runs (a
// fault during one is a second fault, which ends its interruptible actions), and whether the job completed
// (a fault after that is logged, not acted on). Under the controller's lock, as every unit of it; the
// controller wakes its state machine when add() takes a fault.
#pragma once
#include <set>
#include <string>

#include "controller/event_log.h"
#include "controller/planner.h"

namespace mindio {

class FaultIntake {
public:
    FaultIntake(EventLog& events, int log_rank) : events_(events), log_rank_(log_rank) {}

    // A fault of `rank`; `job_ending`: the controller is in EXIT or FINAL, where no fault is acted on.
    // True when it was taken (pending, or a second fault of the flow under way).
    bool add(int rank, FaultKind kind, const std::string& why, const CodedReport* coded, bool job_ending);

    const Faults& pending() const { return pending_; }
    bool has_pending() const { return !pending_.empty(); }
    // The ranks of `faults` and of the pending ones.
    std::set<int> faulty(const Faults& faults) const;
    // The pending faults, handed to the flow that handles them; the flow has no second fault yet.
    Faults take();
    // Faults that arrived meanwhile join `faults` (which keeps its own for a rank in both).
    void take_into(Faults& faults);
    void drop_all() { pending_.clear(); }  // this controller no longer leads

    void begin_flow() { flow_active_ = true, second_fault_ = false; }
    void end_flow() { flow_active_ = false, second_fault_ = false; }
    bool flow_active() const { return flow_active_; }
    bool second_fault() const { return second_fault_; }

    // The first rank to finish training means every collective of it is done. True for that first one.
    bool note_finished(int rank);
    bool completed() const { return finished_rank_ >= 0; }
    int finished_rank() const { return finished_rank_; }  // the first to finish training; -1 before

private:
    EventLog& events_;
    const int log_rank_;
    Faults pending_;
    bool flow_active_ = false, second_fault_ = false;
    int finished_rank_ = -1;
};

}  // namespace mindio
