// A takeover (takeover.h): members of Controller that settle what a backup took over, kept out of controller.cpp.
#include "common/log.h"
#include "common/text.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

// Settled once every rank registered again and sent its status (a fault it reports again comes
// before it), or MINDIO_TAKEOVER_WAIT_S after the first registration. Until then no fault is acted
// on: a decision needs every survivor's step and data.
bool Controller::takeover_open_locked() {
    if (!leadership_.settling()) return false;
    if (leadership_.unsettled(ranks_.all_reported())) return true;
    settle_takeover_locked();
    return false;
}

// The ranks still missing died with the old controller's node: dead, as a lost connection, so that
// the ordinary fault handling replaces them, dumps or exits. A recovery the old controller left is
// restarted (its faults are pending again) or ends in a dump (Leadership::dump_after_takeover).
void Controller::settle_takeover_locked() {
    std::vector<TakeoverRank> view;
    for (const RankEntry& r : ranks_) view.push_back({r.registered, r.recovery_action});
    TakeoverPlan plan = plan_takeover(view, intake_.faulty({}));
    if (!plan.missing.empty()) {
        const std::string wait = std::to_string(cfg_.takeover_wait_ms) + " ms";
        std::string detail = "term " + std::to_string(leadership_.term()) + ": ranks " + list_text(plan.missing) +
                             " did not register within " + wait + " of the takeover (MINDIO_TAKEOVER_WAIT_S)";
        event_locked("takeover_missing", detail);
        LOG_ERROR(kLog, cfg_.rank, detail << ": declared dead");
        for (int rank : plan.missing) {
            declare_dead_locked(rank, "not registered with the controller of term " + std::to_string(leadership_.term()) +
                                          " within " + wait + " of its takeover");
        }
    }
    if (plan.resume == TakeoverResume::Nothing) return;
    event_locked("takeover_recovery", std::string(takeover_resume_name(plan.resume)) + ": " + plan.why);
    LOG_WARN(kLog, cfg_.rank, "term " << leadership_.term() << ": " << plan.why);
    if (plan.resume == TakeoverResume::Dump) leadership_.dump_after_takeover(plan.why);
}

// The dump of a recovery the old controller left half done; faults known meanwhile count as the
// dump's (their ranks save nothing).
void Controller::dump_after_takeover(std::unique_lock<std::mutex>& lock) {
    const std::string why = leadership_.take_takeover_dump();
    intake_.begin_flow();
    Faults faults = intake_.take();
    transition_locked(State::Abnormal, why);
    FaultContext ctx = assess_locked(std::move(faults));
    lock.unlock();
    flows_.run(flow_for(Strategy::Dump), ctx, why);
}

}  // namespace mindio
