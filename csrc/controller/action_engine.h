// The action engine: sends one action at a time to many ranks and collects their replies. Each action
// has a sequence number and a reply deadline; a rank that re-registered (a new generation) gets it
// again. A PRELOCK whose replies are not awaited is held back and leaves with the next action.
//
// It works under the controller's lock (the same mutex and condition variable), so that the flows,
// the server thread's replies and the rank table see one consistent state.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "controller/rank_links.h"
#include "net/server.h"
#include "protocol/messages.h"

namespace mindio {

struct ActionOutcome {
    std::set<int> failed;
    std::map<int, int> results;
    bool interrupted = false;
    bool ok() const { return failed.empty() && !interrupted; }
};

// Ranks that get the same message of an action: it is encoded once for all of them.
using ActionGroups = std::vector<std::pair<std::set<int>, ActionMsg>>;

class ActionEngine {
public:
    // The controller's side, called with its lock held.
    struct Hooks {
        std::function<void(const std::string& kind, const std::string& detail)> event;
        std::function<bool(bool interruptible)> interrupted;  // shutting down, or a second fault
        std::function<void()> after_wait;                     // the controller's death judgement
    };

    ActionEngine(Server& server, std::mutex& mu, std::condition_variable& cv, RankLinks& ranks, Hooks hooks,
                 int log_rank, int default_timeout_ms);

    // Sends the action and waits (taking the lock) until every target replied, died, left or timed out.
    ActionOutcome run(ActionKind kind, const ActionGroups& groups, bool interruptible, int timeout_ms);
    // timeout_ms < 0: the default action time limit.
    ActionOutcome run_all(ActionKind kind, const std::set<int>& ranks, const ActionMsg& msg, bool interruptible,
                          int timeout_ms = -1);

    // Untracked actions: no reply is waited for.
    void send_untracked_locked(const std::set<int>& ranks, const ActionMsg& msg);
    void hold_prelock_locked(const std::set<int>& ranks, const ActionMsg& msg);
    void release_prelock_locked();

    // This controller leads the job from `term` on (a takeover). Its sequence numbers start above any
    // an earlier term can have used, so that a processor, which drops a number lower than its last and
    // answers a repeated one from its cache, runs the new controller's actions.
    void begin_term_locked(uint64_t term);

    // A rank's reply (from the server thread); stale ones are dropped.
    void on_reply_locked(uint64_t seq, const ActionReplyMsg& m);

private:
    struct Pending {
        uint64_t seq = 0;
        ActionKind kind{};
        std::vector<std::string> frames;  // one per group of the action, usually a single one for every rank
        std::vector<size_t> frame_of;          // by rank: its frame (valid for the action's targets)
        std::vector<uint64_t> sent_generation;  // by rank: its registration generation when last sent
        std::set<int> waiting;
        std::map<int, int> results;
        std::map<int, std::string> errors;
    };
    // A PRELOCK sent without waiting for its replies is held back until the next action leaves, so
    // that both reach a rank in one write (at 16k ranks a broadcast of its own took as long as the
    // STOP's), or until the decision may wait (a policy or the cluster manager is consulted).
    struct HeldFrame {
        std::set<int> ranks;
        std::string frame;
    };

    void start_locked(ActionKind kind, const ActionGroups& groups);
    bool collect_locked(std::unique_lock<std::mutex>& lock, bool interruptible, int timeout_ms);
    void drop_gone_locked();
    ActionOutcome finish_locked();
    std::string untracked_frame_locked(const std::set<int>& ranks, const ActionMsg& msg);
    void send_pending_locked(const std::vector<int>& ranks);
    Server::Outgoing outgoing_locked(const std::set<int>& ranks, std::string bytes) const;
    void send_batch_locked(std::vector<Server::Outgoing> batch);

    Server& server_;
    std::mutex& mu_;
    std::condition_variable& cv_;
    RankLinks& ranks_;
    Hooks hooks_;
    const int log_rank_;
    const int default_timeout_ms_;
    std::optional<Pending> pending_;
    std::optional<HeldFrame> held_prelock_;
    uint64_t seq_ = 0;
};

}  // namespace mindio
