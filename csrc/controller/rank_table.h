// The rank table: what the controller knows of each rank, kept by the server thread (registration,
// status, heartbeats, connection losses) and judged for liveness. It records no faults and no events:
// where a judgement finds something, it returns it and the controller acts on it.
//
// Not locked itself: every call is made under the controller's lock.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "controller/liveness.h"
#include "controller/planner.h"
#include "controller/rank_links.h"
#include "controller/state_machine.h"
#include "protocol/messages.h"

namespace mindio {

// What the planner reads of a rank (RankSnapshot: registered, dead, excluded, joining, left, step,
// ckpt_step, data) and what only the rank table and the action engine need.
struct RankEntry : RankSnapshot {
    using Clock = std::chrono::steady_clock;
    uint64_t conn = 0;
    uint64_t generation = 0;  // bumps on every (re-)registration, so the engine knows to resend
    bool connected = false;
    // ARF: a restarted process registered for this dead rank is `joining` (kept out of the job: no
    // STOP/CLEAN, never a saver or source) until repaired; ready once it reported PREREPAIR_FINISH.
    bool ready = false;
    Clock::time_point last_seen, disconnected_at;
    uint32_t heartbeat_ms = 2000;
    int32_t pid = 0;  // of the registered process, as it said (0: not given)
    RunStatus run = RunStatus::Running;
    Section section = Section::None;
    Section last_section = Section::None;  // the latest section it entered, kept after it ended
    int64_t section_ms = 0, limit_ms = 0;
    uint64_t progress = 0;
    bool suspect = false;  // silent for heartbeat_misses periods with its connection open
    bool hang_reported = false;  // named by the hang rule; again only after it reported progress
    bool finished = false;       // its training is over (RunStatus::Finished)
    bool end_reported = false;   // its launcher reported its process ended (until a process registers again)
    std::string domain;          // its failure domain (node), from its ReplicaInfo; empty: not said
    uint16_t recovery_action = 0;  // as it registered: the last action of a recovery it is inside; 0 none
    bool reported = false;         // sent a status since it registered (its step and data are known)
    // Silent when an action's deadline passed, and nothing heard from it since: a partition that began
    // during a recovery shows as this first (its connection stays open), so the lease does not count it.
    bool unanswered = false;
    // Node 0's launcher reported (NoReplacement) that this rank's node is lost and nothing waits to take
    // its place: why, until a process of this rank registers or is heard from (a stalled launcher's
    // workers may live on).
    std::string unreplaced_why;
    // The codes of the sub-health it reported (ReportState::SubHealth), oldest first, each once.
    std::vector<std::string> sub_health;
    bool retired = false;          // dropped by a scale-in (elastic training): the job goes on without it
                                   // (joining as well: a restarted process returned for it, for a scale-out)
};

// What a liveness judgement found: ranks newly suspect (with what to log of each) and the ranks the
// hang rule names (with the rule's reason), reported or not.
struct LivenessNews {
    std::vector<std::pair<int, std::string>> suspects;
    std::set<int> hung;
    std::string why;
};

class RankTable : public RankLinks {
public:
    using Clock = std::chrono::steady_clock;
    // arf: process replacement is enabled (a restarted process may take a dead rank's place).
    // elastic: elastic training; a restarted process may also take a retired rank's place (a scale-out).
    RankTable(int world_size, bool arf, LivenessRules rules, bool elastic = false);

    size_t size() const { return ranks_.size(); }
    RankEntry& operator[](int rank) { return ranks_[rank]; }
    const RankEntry& operator[](int rank) const { return ranks_[rank]; }
    std::vector<RankEntry>::const_iterator begin() const { return ranks_.begin(); }
    std::vector<RankEntry>::const_iterator end() const { return ranks_.end(); }

    // Registration.
    bool takes_a_dead_ranks_place(const RegisterMsg& m) const;
    std::string arf_refusal(const RegisterMsg& m, State state) const;  // empty: not refused
    bool is_replacement(const RegisterMsg& m) const;
    void mark_joining(int rank);
    // Binds `m.rank` to `conn`; returns whether the rank had registered before.
    bool register_conn(uint64_t conn, const RegisterMsg& m);
    int rank_of_conn(uint64_t conn) const;  // -1: not a registered connection

    // What the rank sent. heard_from: the silence it ended if it was a suspect.
    std::optional<int64_t> heard_from(int rank);
    bool apply_status(const RankStatusMsg& m);  // true when the rank newly finished training
    bool mark_left(int rank);                   // false if it had left already
    // The connection closed; false when it is no longer the rank's (it re-registered since).
    bool disconnect(uint64_t conn);

    // Liveness: closed connections not re-registered within a heartbeat period (to be declared dead),
    // silence and hangs.
    std::vector<int> lost_connections() const;
    LivenessNews judge_liveness();  // marks the new suspects
    std::set<int> take_unreported(const std::set<int>& hung);  // marks them reported
    Clock::time_point connection_losses_settled(Clock::duration margin) const;

    // Views.
    std::set<int> live() const;
    bool all_registered() const;
    // Every rank registered and sent its status since (or lost its connection again).
    bool all_reported() const;
    RankSnapshots snapshot() const { return RankSnapshots(ranks_.begin(), ranks_.end()); }

    // RankLinks, for the action engine.
    size_t rank_count() const override { return ranks_.size(); }
    bool connected(int rank) const override { return ranks_[rank].connected; }
    uint64_t conn(int rank) const override { return ranks_[rank].conn; }
    uint64_t generation(int rank) const override { return ranks_[rank].generation; }
    const char* gone(int rank) const override;
    void exclude(int rank) override { ranks_[rank].excluded = true; }
    void no_reply(int rank) override;

private:
    static bool gone_or_silent(const RankEntry& r);
    std::vector<RankEntry> ranks_;
    std::map<uint64_t, int> conn_rank_;
    const bool arf_;
    const LivenessRules rules_;
    const bool elastic_;
};

}  // namespace mindio
