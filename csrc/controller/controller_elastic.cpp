// Elastic training (members of Controller): the scale-in's glue and the scale-out (scale_out.h).
#include <algorithm>

#include "common/log.h"
#include "common/text.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

bool Controller::scaled_in_locked() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const RankEntry& r) { return r.retired; });
}

Capabilities Controller::caps_now_locked() const {
    Capabilities caps = cfg_.caps;
    // Online repair and process replacement are not built at the smaller size; a second scale-in is.
    if (scaled_in_locked()) caps.retry = caps.recover = false;
    return caps;
}

// The scale-in's start: the dump it saves is of the repair step, which every survivor then reloads.
void Controller::begin_scale_in(FaultContext& ctx, FlowRun& run) {
    std::lock_guard<std::mutex> lock(mu_);
    // Chosen at the decision (the cluster manager's downgrade) rather than after a replacement's wait.
    if (state_ == State::Abnormal) transition_locked(State::EnvClear, run.reason);
    ctx.reload_step = ctx.repair_step;
    event_locked("scale_in", "ranks " + list_text(ctx.replace) + " at step " + std::to_string(ctx.repair_step) +
                                 ": " + run.reason);
    LOG_INFO(kLog, cfg_.rank, "elastic training: scaling in without ranks " << list_text(ctx.replace) << " after step "
                                  << ctx.repair_step << " (" << run.reason << ")");
    run.targets = ranks_.live();
}

// Ranks dropped by a scale-in: dead, not awaited, never counted as a fault or a replacement again.
void Controller::retire(const std::set<int>& ranks, Leaving why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (why == Leaving::WithSlice) {
        event_locked("left_with_slice", "ranks " + list_text(ranks));
        LOG_INFO(kLog, cfg_.rank, "elastic training: ranks " << list_text(ranks) << " leave the job with their "
                                      "data-parallel slices, which lost a rank; the survivors go on without them");
    }
    for (int rank : ranks) {
        RankEntry& r = ranks_[rank];
        r.retired = true;
        event_locked("retired", "rank " + std::to_string(rank));
        if (why == Leaving::Lost && r.joining && r.connected) {
            returned_during_scale_in_locked(rank);
            continue;
        }
        r.dead = true;
        r.joining = r.ready = false;
        r.left = true;
    }
}

// A lost rank's restarted process (a launcher's worker reboot) can register while the scale-in that drops
// the rank still runs: it waits as a replacement that no flow awaits. It is the rank's return, as if it had
// registered just after the scale-in; forgetting it would leave it waiting, and the scale-out never come.
void Controller::returned_during_scale_in_locked(int rank) {
    event_locked("returned", "rank " + std::to_string(rank));
    LOG_INFO(kLog, cfg_.rank, "rank " << rank << " returned during the scale-in (a restarted process registered "
                                  "before it ended): the job scales out once every retired rank is back and ready, "
                                  "or after MINDIO_SCALE_OUT_WAIT_S with the ready ones");
}

// ---- the scale-out (scale_out.h) ------------------------------------------------------------------

bool Controller::scale_out_due_locked() {
    // A job that completed, or whose ranks all left, has nobody to grow back with.
    if (!cfg_.caps.elastic || state_ != State::Normal || intake_.completed() || ranks_.live().empty()) return false;
    std::vector<ReturnView> view;
    for (const RankEntry& r : ranks_) view.push_back({r.retired, r.joining, r.ready, r.connected});
    ScaleOutJudgement j = elastic_.judge_returns(view, Clock::now());
    if (j.verdict == ScaleOutVerdict::Abandon) {
        event_locked("scale_out_abandoned", j.why);
        LOG_ERROR(kLog, cfg_.rank, "elastic training: " << j.why);
    } else if (j.partial) {
        event_locked("scale_out_partial", j.why);
        LOG_WARN(kLog, cfg_.rank, "elastic training: " << j.why);
    }
    send_returned_away_locked(j.sent_away);
    return j.verdict == ScaleOutVerdict::Start;
}

// Returned processes that did not make the set complete in time (or, in a partial scale-out, were not
// ready): told to exit and cut off; their ranks stay retired, and a later return may try again.
void Controller::send_returned_away_locked(const std::set<int>& ranks) {
    if (ranks.empty()) return;
    FaultContext none;
    none.repair_step = repair_step_;
    // The EXIT names the scale-out (the process leaves; the job goes on), and the goodbye after it keeps the
    // processor from registering again as a new return.
    const std::string why = "sent away: the scale-out did not happen";
    const std::string bye = encode_frame(MsgType::Goodbye, 0, encode(GoodbyeMsg{cfg_.rank, why}));
    for (int rank : ranks) {
        RankEntry& r = ranks_[rank];
        actions_.send_untracked_locked({rank}, base_action(ActionKind::Exit, none, Strategy::ScaleOut));
        server_.send(r.conn, bye);
        server_.close(r.conn, why);
        r.dead = r.left = true;
        r.joining = r.ready = false;
    }
}

void Controller::return_lost_locked(int rank, const std::string& why) {
    RankEntry& r = ranks_[rank];
    const bool was_returning = r.joining;
    r.joining = r.ready = false;
    r.left = true;
    if (!was_returning) return;
    event_locked("return_lost", "rank " + std::to_string(rank) + ": " + why);
    LOG_WARN(kLog, cfg_.rank, "elastic training: rank " << rank << ", returned after the scale-in, was lost before "
                                  "the scale-out (" << why << "): the job goes on at its smaller size");
}

// Retired ranks are back and ready (every one of them, or after the wait some: partial): the survivors stop
// at a step they all completed (PRELOCK), and the scale_out flow grows the job from that step, back to its
// original size or, partial, to the size without the absent ranks' slices.
void Controller::scale_out() {
    std::unique_lock<std::mutex> lock(mu_);
    intake_.begin_flow();
    std::set<int> returned, absent;
    for (size_t i = 0; i < ranks_.size(); ++i) {
        const RankEntry& r = ranks_[i];
        if (!r.retired) continue;
        // one that registered since the judgement is not ready: it stays out of this scale-out
        (r.joining && r.ready ? returned : absent).insert(static_cast<int>(i));
    }
    transition_locked(State::Abnormal, "elastic training: retired ranks " + list_text(returned) + " returned and are ready" +
                                           (absent.empty() ? "" : "; ranks " + list_text(absent) + " stay out"));
    lock.unlock();
    const int64_t step = prelock(Faults{});
    lock.lock();
    if (intake_.has_pending()) {
        LOG_WARN(kLog, cfg_.rank, "elastic training: a fault arrived before the scale-out; it is handled first");
        lock.unlock();
        return handle_fault();
    }
    FaultContext ctx = assess_locked({}, step);
    ctx.replace = returned;
    ctx.absent = absent;
    ctx.reload_step = ctx.repair_step;
    const std::string without = absent.empty() ? "" : ", without ranks " + list_text(absent);
    event_locked("scale_out", "ranks " + list_text(returned) + " at step " + std::to_string(ctx.repair_step) +
                                  (absent.empty() ? "" : ": partial" + without));
    LOG_INFO(kLog, cfg_.rank, "elastic training: scaling out with ranks " << list_text(returned) << " after step "
                                  << ctx.repair_step << without
                                  << " (they returned after the scale-in and are ready)");
    lock.unlock();
    flows_.run(flow_for(Strategy::ScaleOut), ctx);
}

}  // namespace mindio
