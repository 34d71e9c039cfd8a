#include "controller/action_engine.h"

#include <algorithm>

#include "common/log.h"
#include "common/text.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";
constexpr auto kTick = std::chrono::milliseconds(20);  // the controller's wake-up period
using Clock = std::chrono::steady_clock;
// A term numbers its actions from (term - 1) << 32: no term sends 2^32 actions.
constexpr int kTermSeqShift = 32;

}  // namespace

ActionEngine::ActionEngine(Server& server, std::mutex& mu, std::condition_variable& cv, RankLinks& ranks,
                           Hooks hooks, int log_rank, int default_timeout_ms)
    : server_(server),
      mu_(mu),
      cv_(cv),
      ranks_(ranks),
      hooks_(std::move(hooks)),
      log_rank_(log_rank),
      default_timeout_ms_(default_timeout_ms) {}

// An action no reply is waited for: its own sequence number, so that the processors run it in order
// with the tracked ones, and a late reply is dropped as stale. Returns its frame, to send or hold.
std::string ActionEngine::untracked_frame_locked(const std::set<int>& ranks, const ActionMsg& msg) {
    uint64_t seq = ++seq_;
    std::string who = list_text(ranks);
    hooks_.event("action", std::string(action_name(msg.kind)) + " sn=" + std::to_string(seq) + " untracked ranks=" + who);
    LOG_INFO(kLog, log_rank_, "action " << action_name(msg.kind) << " sn " << seq << " to " << who << " (no reply awaited)");
    return encode_frame(MsgType::Action, seq, encode(msg));
}

void ActionEngine::send_untracked_locked(const std::set<int>& ranks, const ActionMsg& msg) {
    send_batch_locked({outgoing_locked(ranks, untracked_frame_locked(ranks, msg))});
}

void ActionEngine::hold_prelock_locked(const std::set<int>& ranks, const ActionMsg& msg) {
    held_prelock_ = HeldFrame{ranks, untracked_frame_locked(ranks, msg)};
}

void ActionEngine::release_prelock_locked() {
    if (held_prelock_) send_batch_locked({});
}

// `bytes` for the connections of those of `ranks` that are connected now.
Server::Outgoing ActionEngine::outgoing_locked(const std::set<int>& ranks, std::string bytes) const {
    Server::Outgoing out{{}, std::move(bytes)};
    out.conns.reserve(ranks.size());
    for (int r : ranks) {
        if (ranks_.connected(r)) out.conns.push_back(ranks_.conn(r));
    }
    return out;
}

// Everything the state machine sends goes through here: one server call per action, behind the
// held-back PRELOCK when there is one (same sequence order, same writes).
void ActionEngine::send_batch_locked(std::vector<Server::Outgoing> batch) {
    if (held_prelock_) {
        batch.insert(batch.begin(), outgoing_locked(held_prelock_->ranks, std::move(held_prelock_->frame)));
        held_prelock_.reset();
    }
    server_.send(batch);
}

// (Re)sends the pending action to `ranks`, each its group's frame, as one batch.
void ActionEngine::send_pending_locked(const std::vector<int>& ranks) {
    std::vector<Server::Outgoing> batch;
    for (const auto& frame : pending_->frames) batch.push_back({{}, frame});
    for (int r : ranks) {
        if (ranks_.connected(r)) batch[pending_->frame_of[r]].conns.push_back(ranks_.conn(r));
        pending_->sent_generation[r] = ranks_.generation(r);
    }
    send_batch_locked(std::move(batch));
}

ActionOutcome ActionEngine::run_all(ActionKind kind, const std::set<int>& ranks, const ActionMsg& msg,
                                    bool interruptible, int timeout_ms) {
    return run(kind, {{ranks, msg}}, interruptible, timeout_ms < 0 ? default_timeout_ms_ : timeout_ms);
}

ActionOutcome ActionEngine::run(ActionKind kind, const ActionGroups& groups, bool interruptible, int timeout_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    start_locked(kind, groups);
    bool interrupted = !collect_locked(lock, interruptible, timeout_ms);
    ActionOutcome outcome = finish_locked();
    outcome.interrupted = interrupted;
    return outcome;
}

// Encodes the action once per group and sends it to every target.
void ActionEngine::start_locked(ActionKind kind, const ActionGroups& groups) {
    auto queue_start = Clock::now();
    Pending p;
    p.seq = ++seq_;
    p.kind = kind;
    p.frame_of.resize(ranks_.rank_count());
    p.sent_generation.resize(ranks_.rank_count());
    for (const auto& [ranks, msg] : groups) {
        if (ranks.empty()) continue;
        p.frames.push_back(encode_frame(MsgType::Action, p.seq, encode(msg)));
        for (int r : ranks) {
            p.frame_of[r] = p.frames.size() - 1;
            p.waiting.insert(r);
        }
    }
    pending_ = std::move(p);
    std::vector<int> targets(pending_->waiting.begin(), pending_->waiting.end());
    send_pending_locked(targets);
    double queue_ms = std::chrono::duration<double, std::milli>(Clock::now() - queue_start).count();
    std::string who = list_text(targets);
    hooks_.event("action", std::string(action_name(kind)) + " sn=" + std::to_string(pending_->seq) + " ranks=" + who);
    LOG_INFO(kLog, log_rank_, "action " << action_name(kind) << " sn " << pending_->seq << " to " << who << " (queued in "
                                        << queue_ms << " ms)");
}

// The targets that died or left will not reply: each gets its error.
void ActionEngine::drop_gone_locked() {
    for (auto it = pending_->waiting.begin(); it != pending_->waiting.end();) {
        if (const char* why = ranks_.gone(*it)) {
            pending_->errors[*it] = why;
            it = pending_->waiting.erase(it);
        } else {
            ++it;
        }
    }
}

// Waits until no target is left to wait for (true), or the wait is interrupted (false).
bool ActionEngine::collect_locked(std::unique_lock<std::mutex>& lock, bool interruptible, int timeout_ms) {
    auto start = Clock::now();
    auto deadline = start + std::chrono::milliseconds(timeout_ms);
    auto resend_at = start + std::chrono::milliseconds(timeout_ms / 2);
    while (true) {
        drop_gone_locked();
        if (pending_->waiting.empty()) return true;
        if (hooks_.interrupted(interruptible)) return false;
        auto now = Clock::now();
        // A reply can only be lost with its connection; resend when the rank comes back, and once
        // half-way to the deadline in case a reply was dropped with a connection we never saw die.
        bool resend_all = now >= resend_at;
        if (resend_all) resend_at = deadline + std::chrono::hours(1);
        std::vector<int> resend;
        for (int r : pending_->waiting) {
            if (resend_all || (ranks_.connected(r) && ranks_.generation(r) != pending_->sent_generation[r])) {
                resend.push_back(r);
            }
        }
        if (!resend.empty()) send_pending_locked(resend);
        if (now >= deadline) {
            for (int r : pending_->waiting) {
                pending_->errors[r] = std::string("no reply to ") + action_name(pending_->kind) + " within " +
                                      std::to_string(timeout_ms) + " ms (handler time limit exceeded)";
                ranks_.no_reply(r);
            }
            pending_->waiting.clear();
            return true;
        }
        cv_.wait_until(lock, std::min({deadline, resend_at, now + kTick}));
        hooks_.after_wait();
    }
}

// Ends the pending action: a target that failed it is excluded from the job.
ActionOutcome ActionEngine::finish_locked() {
    ActionOutcome outcome;
    const ActionKind kind = pending_->kind;
    outcome.results = pending_->results;
    for (const auto& [rank, error] : pending_->errors) {
        outcome.failed.insert(rank);
        ranks_.exclude(rank);
        hooks_.event("action_failed", std::string(action_name(kind)) + " rank " + std::to_string(rank) + ": " + error);
        LOG_ERROR(kLog, log_rank_, "action " << action_name(kind) << " failed on rank " << rank << ": " << error);
    }
    pending_.reset();
    return outcome;
}

void ActionEngine::begin_term_locked(uint64_t term) {
    if (term > 1) seq_ = std::max(seq_, (term - 1) << kTermSeqShift);
}

void ActionEngine::on_reply_locked(uint64_t seq, const ActionReplyMsg& m) {
    if (!pending_ || pending_->seq != seq || !pending_->waiting.count(m.rank)) {
        LOG_DEBUG(kLog, log_rank_, "ignored stale reply of rank " << m.rank << " to sn " << seq);
        return;
    }
    if (m.kind != pending_->kind) {
        pending_->errors[m.rank] = std::string("replied to ") + action_name(m.kind) + " for sn " + std::to_string(seq) +
                                   " which is " + action_name(pending_->kind);
    } else if (m.result != 0 && !(m.kind == ActionKind::Clean && m.result == kCleanNeedsNoRebuild) &&
               !(m.kind == ActionKind::RebuildGroup && m.result == kLeavesTheJob)) {
        pending_->errors[m.rank] = m.message.empty() ? "handler failed with code " + std::to_string(m.result) : m.message;
    }
    pending_->results[m.rank] = m.result;
    pending_->waiting.erase(m.rank);
    // Only the last reply wakes the engine: each wake-up walks the whole waiting set, so waking it
    // per reply cost O(N^2) per action at N ranks. Errors are collected when the action ends.
    if (pending_->waiting.empty()) cv_.notify_all();
}

}  // namespace mindio
