#include "controller/rank_table.h"

#include <algorithm>

namespace mindio {

RankTable::RankTable(int world_size, bool arf, LivenessRules rules, bool elastic)
    : ranks_(world_size), arf_(arf), rules_(rules), elastic_(elastic) {}

// A rank silent past heartbeat_misses periods with its connection open (a suspect) counts as gone once a
// process comes for its place: only a launcher that saw it die, or took its lost node over, starts one,
// and a node cut off from the network keeps its connections open for minutes.
bool RankTable::gone_or_silent(const RankEntry& r) {
    return r.registered && !r.left && (!r.connected || r.suspect);
}

// The reference's rule for a rebooted process: the controller, not the process, knows that a rank is
// waiting for a new process. A process registering for the first time (and allowed to replace) for a
// rank that is dead, joining, or whose connection is gone is that rank's replacement, whether or not a
// launcher marked it restarted. A rank that left on purpose is not waiting for one. A rank retired by a
// scale-in takes a restarted process only under elastic training: its return, for a scale-out.
bool RankTable::takes_a_dead_ranks_place(const RegisterMsg& m) const {
    if (!m.may_replace || !arf_) return false;
    const RankEntry& r = ranks_[m.rank];
    if (r.retired) return elastic_ && r.dead;
    return r.dead || r.joining || gone_or_silent(r);
}

// Which registrations ARF refuses. A dead rank comes back only as a restarted process, and a restarted
// process only replaces a rank that is dead (or whose connection is gone, or that is silent: the
// replacement is the proof the old process died or was cut off), while the controller can still use it.
std::string RankTable::arf_refusal(const RegisterMsg& m, State state) const {
    const RankEntry& r = ranks_[m.rank];
    std::string who = "rank " + std::to_string(m.rank);
    if (r.retired && !elastic_) {
        return who + " was retired by a scale-in: the job goes on without it, and grows back (scale-out) only "
               "under elastic training";
    }
    if (r.retired && !m.restarted) {
        return who + " was retired by a scale-in (elastic training): only a restarted process may return for it, "
               "one marked MINDIO_RESTARTED=1 by the launcher";
    }
    if (!m.restarted) {
        if (!r.dead) return "";
        return who + " was declared dead; only a restarted process may take its place: one started with " +
               "tft_init_processor(..., enable_arf=True), or marked MINDIO_RESTARTED=1 by the launcher" + (arf_ ? "" : ", and process replacement (ARF) is not enabled");
    }
    if (!arf_) {
        return "a restarted process registered as " + who + ", but process replacement (ARF) is not enabled on the "
               "controller (tft_init_controller(..., enable_arf=True))";
    }
    if (ends_the_job(state)) {
        return "a restarted process registered as " + who + " while the controller is in state " + state_name(state) +
               ", where no process is replaced";
    }
    if (r.registered && r.connected && !r.dead && !r.joining && !r.suspect) {
        return who + " is alive and connected: a restarted process may only replace a dead rank";
    }
    return "";
}

// Whether `m` is a restarted process taking a dead rank's place (or that of a rank whose connection
// closed, or that is silent, which the controller must declare dead first).
bool RankTable::is_replacement(const RegisterMsg& m) const {
    const RankEntry& r = ranks_[m.rank];
    return m.restarted && (r.dead || r.joining || (r.registered && (!r.connected || r.suspect)));
}

void RankTable::mark_joining(int rank) {
    RankEntry& r = ranks_[rank];
    if (!r.joining) r.ready = false;  // a fresh replacement; a reconnecting one keeps its report
    r.joining = true;
    r.dead = false;
    r.excluded = false;
    r.step = -1;
    r.data = DataStatus::Updated;
}

bool RankTable::register_conn(uint64_t conn, const RegisterMsg& m) {
    RankEntry& r = ranks_[m.rank];
    if (r.conn) conn_rank_.erase(r.conn);
    bool again = r.registered;
    r.conn = conn;
    r.registered = r.connected = true;
    r.left = r.end_reported = false;
    ++r.generation;
    r.heartbeat_ms = m.heartbeat_ms;
    r.pid = m.pid;
    r.last_seen = Clock::now();
    r.suspect = r.hang_reported = r.unanswered = false;
    r.unreplaced_why.clear();
    r.section = Section::None;
    r.recovery_action = m.recovery_action;
    r.reported = false;
    conn_rank_[conn] = m.rank;
    return again;
}

int RankTable::rank_of_conn(uint64_t conn) const {
    auto it = conn_rank_.find(conn);
    return it == conn_rank_.end() ? -1 : it->second;
}

std::optional<int64_t> RankTable::heard_from(int rank) {
    RankEntry& r = ranks_[rank];
    auto now = Clock::now();
    std::optional<int64_t> silence;
    if (r.suspect) {
        silence = std::chrono::duration_cast<std::chrono::milliseconds>(now - r.last_seen).count();
        r.suspect = false;
    }
    r.unanswered = false;
    r.unreplaced_why.clear();  // its process talks: a report that nothing replaces it was about a stall
    r.last_seen = now;
    return silence;
}

// A rank whose handler overran while its heartbeat went on is alive and reachable: only a rank silent
// for as long as makes it a suspect is marked.
void RankTable::no_reply(int rank) {
    RankEntry& r = ranks_[rank];
    auto silent_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - r.last_seen).count();
    if (silent_ms > rules_.heartbeat_misses * r.heartbeat_ms) r.unanswered = true;
}

bool RankTable::apply_status(const RankStatusMsg& m) {
    RankEntry& r = ranks_[m.rank];
    if (m.section != r.section || m.progress != r.progress || m.step != r.step) r.hang_reported = false;
    r.section = m.section;
    if (m.section != Section::None) r.last_section = m.section;
    r.section_ms = m.section_ms;
    r.limit_ms = m.limit_ms;
    r.progress = m.progress;
    r.step = m.step;
    r.ckpt_step = m.ckpt_step;
    r.data = m.data_status;
    r.run = m.run_status;
    r.reported = true;
    if (m.run_status != RunStatus::Finished || r.finished) return false;
    r.finished = true;
    return true;
}

bool RankTable::mark_left(int rank) {
    if (ranks_[rank].left) return false;
    ranks_[rank].left = true;
    return true;
}

bool RankTable::disconnect(uint64_t conn) {
    int rank = rank_of_conn(conn);
    if (rank < 0) return false;
    conn_rank_.erase(conn);
    RankEntry& r = ranks_[rank];
    if (r.conn != conn) return false;
    r.connected = false;
    r.disconnected_at = Clock::now();
    return true;
}

// Death is a closed connection that no processor re-registered within one heartbeat period. Silence
// with the connection open is judged by judge_liveness.
std::vector<int> RankTable::lost_connections() const {
    auto now = Clock::now();
    std::vector<int> lost;
    for (size_t rank = 0; rank < ranks_.size(); ++rank) {
        const RankEntry& r = ranks_[rank];
        if (!r.registered || r.dead || r.left || r.connected) continue;
        if (now - r.disconnected_at <= std::chrono::milliseconds(r.heartbeat_ms)) continue;
        lost.push_back(static_cast<int>(rank));
    }
    return lost;
}

// Suspects are reported once per silence; the hung ranks every time the rule fires.
LivenessNews RankTable::judge_liveness() {
    auto now = Clock::now();
    std::vector<RankSighting> sightings(ranks_.size());
    for (size_t i = 0; i < ranks_.size(); ++i) {
        const RankEntry& r = ranks_[i];
        RankSighting& s = sightings[i];
        s.watched = r.registered && r.connected && !r.dead && !r.left && !r.joining;
        s.silent_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - r.last_seen).count();
        s.heartbeat_ms = r.heartbeat_ms;
        s.step = r.step;
        s.section = r.section;
        s.section_ms = r.section_ms;
        s.limit_ms = r.limit_ms;
        s.section_progress = r.progress;
    }
    LivenessVerdict verdict = mindio::judge_liveness(sightings, rules_);
    LivenessNews news{{}, std::move(verdict.hung), std::move(verdict.why)};
    for (int rank : verdict.suspects) {
        RankEntry& r = ranks_[rank];
        if (r.suspect) continue;
        r.suspect = true;
        news.suspects.push_back({rank, "rank " + std::to_string(rank) + " silent for " +
                                           std::to_string(sightings[rank].silent_ms) +
                                           " ms with its connection open (last in section " + section_name(r.section) + ")"});
    }
    return news;
}

// The hung ranks not reported since they last showed progress; they are reported now.
std::set<int> RankTable::take_unreported(const std::set<int>& hung) {
    std::set<int> fresh;
    for (int rank : hung) {
        if (!ranks_[rank].hang_reported) fresh.insert(rank);
    }
    for (int rank : fresh) ranks_[rank].hang_reported = true;
    return fresh;
}

// When every closed connection will have been judged: one heartbeat period after it closed.
RankTable::Clock::time_point RankTable::connection_losses_settled(Clock::duration margin) const {
    Clock::time_point latest = Clock::time_point::min();
    for (const RankEntry& r : ranks_) {
        if (r.registered && !r.connected && !r.dead && !r.left) {
            latest = std::max(latest, r.disconnected_at + std::chrono::milliseconds(r.heartbeat_ms) + margin);
        }
    }
    return latest;
}

std::set<int> RankTable::live() const {
    std::set<int> live;
    for (size_t i = 0; i < ranks_.size(); ++i) {
        if (ranks_[i].live()) live.insert(static_cast<int>(i));
    }
    return live;
}

bool RankTable::all_registered() const {
    return std::all_of(ranks_.begin(), ranks_.end(), [](const RankEntry& r) { return r.registered; });
}

bool RankTable::all_reported() const {
    return std::all_of(ranks_.begin(), ranks_.end(),
                       [](const RankEntry& r) { return r.registered && (r.reported || !r.connected); });
}

const char* RankTable::gone(int rank) const {
    const RankEntry& r = ranks_[rank];
    if (r.dead) return "rank died before replying";
    return r.left ? "rank left before replying" : nullptr;
}

}  // namespace mindio
