// What the ranks' messages do to the job (InboxHost, inbox.h: the server thread, after the inbox decoded and
// checked them): registrations, statuses, replica layouts, reports, replies, goodbyes and lost connections.
#include "common/log.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

void Controller::on_register(uint64_t conn, RegisterMsg m, const std::string& refusal) {
    std::lock_guard<std::mutex> lock(mu_);
    if (refusal.empty() && awaits_majority_locked(conn, m)) return;
    register_locked(conn, std::move(m), refusal);
}

// A registration that passed the token and the job's shape; `refusal` non-empty: refused for it.
void Controller::register_locked(uint64_t conn, RegisterMsg m, std::string refusal) {
    const bool proven = !cfg_.token.empty();
    int32_t result = 1;
    if (refusal.empty()) {
        refusal = term_refusal_locked(m);
        if (!refusal.empty()) result = kNotTheLeader;
    }
    if (refusal.empty() && ranks_.takes_a_dead_ranks_place(m)) m.restarted = true;
    if (refusal.empty()) {
        refusal = ranks_.arf_refusal(m, state_);
        if (!refusal.empty() && ends_the_job(state_)) result = kJobEnding;
    }
    if (!refusal.empty()) {
        inbox_.note_refused_registration();
        const RegisterAckMsg ack{result, refusal, false, leadership_.term()};
        server_.send(conn, encode_frame(MsgType::RegisterAck, 0, encode(ack)));
        if (!proven) return inbox_.refuse_unproven_locked(conn, "registration refused", "registration of rank " +
                                                                                   std::to_string(m.rank) + ": " + refusal);
        event_locked("register_refused", "rank " + std::to_string(m.rank) + ": " + refusal);
        LOG_WARN(kLog, cfg_.rank, "refused registration of rank " << m.rank << " on connection " << conn << ": " << refusal);
        server_.close(conn, "registration refused: " + refusal);
        return;
    }
    bool replacing = accept_replacement_locked(m);
    const RankEntry& r = ranks_[m.rank];
    if (r.connected && r.conn != conn) server_.close(r.conn, "rank re-registered on a new connection");
    bool again = ranks_.register_conn(conn, m);
    if (m.controllers > 1) leadership_.note_backups_listed();
    server_.authenticate(conn);
    const RegisterAckMsg ack{0, "ok", replacing, leadership_.term()};
    server_.send(conn, encode_frame(MsgType::RegisterAck, 0, encode(ack)));
    const bool returning = replacing && r.retired;
    const char* kind = returning ? "returned" : replacing ? "replacement" : again ? "reregister" : "register";
    event_locked(kind, "rank " + std::to_string(m.rank));
    LOG_INFO(kLog, cfg_.rank, "rank " << m.rank << " "
                                  << (returning ? "returned after the scale-in (a restarted process): the job scales out "
                                                  "once every retired rank is back and ready, or after "
                                                  "MINDIO_SCALE_OUT_WAIT_S with the ready ones"
                                      : replacing ? "replaced by a restarted process"
                                      : again     ? "re-registered"
                                                  : "registered"));
    cv_.notify_all();
}

std::string Controller::term_refusal_locked(const RegisterMsg& m) {
    const uint64_t term = leadership_.term();
    if (!leadership_.may_lead()) {
        return "this controller (term " + std::to_string(term) + ") " + leadership_.not_leading();
    }
    // Only a rank that lost the controller it registered with asks a backup to lead (awaits_majority_locked).
    // A process that never registered (a replacement, or the job's first start reaching a backup before the
    // active one) would otherwise make an idle backup lead a part of the job beside the real leader.
    if (leadership_.idle_backup()) {
        return "a backup controller that leads no job yet: this process never registered (term 0)";
    }
    if (m.term > term) {
        supersede_locked(m.term);
        return "this controller (term " + std::to_string(term) + ") was replaced by one of term " + std::to_string(m.term);
    }
    return "";
}

// A rank registered under a newer term: another controller took over. This one must not act on any
// rank again; its connections close, and their processors move on to the next controller of their list.
void Controller::supersede_locked(uint64_t newer) {
    const uint64_t term = leadership_.term();
    event_locked("superseded", "term " + std::to_string(term) + " replaced by term " + std::to_string(newer));
    LOG_ERROR(kLog, cfg_.rank, "this controller (term " << term << ") was replaced by a controller of term " << newer
                                   << ": it no longer acts, and closes its connections");
    stop_leading_locked("was replaced by a controller of term " + std::to_string(newer));
}

void Controller::stop_leading_locked(const std::string& why) {
    leadership_.stop_leading(why);
    for (size_t rank = 0; rank < ranks_.size(); ++rank) {
        if (ranks_[rank].connected) server_.close(ranks_[rank].conn, "this controller " + why);
    }
    intake_.drop_all();
}

// Marks `m.rank` as joining when `m` is a restarted process taking a dead rank's place; returns whether
// it is. A rank whose connection closed but that was not yet declared dead is declared dead now.
// After a takeover, a restarted process for a rank not registered here replaces it as well: that
// rank's process died before or with the old controller. So does a process that may replace and never
// registered with any controller: every process of the job registered with the one that was lost.
bool Controller::accept_replacement_locked(const RegisterMsg& m) {
    const RankEntry& r = ranks_[m.rank];
    const bool after_takeover = leadership_.took_over() && !r.registered && cfg_.caps.recover &&
                                (m.restarted || (m.may_replace && m.term == 0));
    if (!ranks_.is_replacement(m) && !after_takeover) return false;
    if (!r.dead && !r.joining) {
        const bool silent = !after_takeover && r.connected;
        declare_dead_locked(m.rank, after_takeover ? "a restarted process registered in its place after the takeover"
                                    : silent       ? "silent and a restarted process registered in its place"
                                                   : "connection lost and a restarted process registered in its place");
        if (silent) declare_silent_neighbours_dead_locked(m.rank);
    }
    ranks_.mark_joining(m.rank);
    return true;
}

void Controller::on_status(const RankStatusMsg& m, bool heartbeat) {
    std::lock_guard<std::mutex> lock(mu_);
    heard_from_locked(m.rank);
    if (m.step > ranks_[m.rank].step) slow_.record(m.rank, m.step, m.compute_ms);  // once per step, not per beat
    if (ranks_.apply_status(m)) note_finished_locked(m.rank);
    if (!heartbeat) cv_.notify_all();
}

// The first rank to finish means every collective of the training is done: the job has completed.
void Controller::note_finished_locked(int rank) {
    if (!intake_.note_finished(rank)) return;
    observe_goodput_locked();  // the last step's completion, then the end of the accounting
    goodput_.finish(Clock::now());
    event_locked("finished", "rank " + std::to_string(rank));
    LOG_INFO(kLog, cfg_.rank, "rank " << rank << " finished training: the job has completed, a later fault is not acted on");
}

void Controller::on_replica(const ReplicaInfoMsg& m) {
    std::lock_guard<std::mutex> lock(mu_);
    heard_from_locked(m.rank);
    ranks_[m.rank].domain = m.domain;
    if (ranks_[m.rank].retired && !elastic_.relayout()) {
        // A process returned for a rank the scale-in retired reports the layout of the job it rejoins,
        // not of the smaller one running now; it reports it again at the scale-out's REBUILD_GROUP.
        event_locked("replica_deferred", "rank " + std::to_string(m.rank) + ": returned, reports again at the scale-out");
        return;
    }
    elastic_.note_report(m.rank);
    for (const auto& g : m.groups) {
        std::vector<int> ranks(g.ranks.begin(), g.ranks.end());
        try {
            replicas_.add(g.optimizer_type, g.replica_cnt, g.replica_shift, ranks);
        } catch (const std::invalid_argument& e) {
            // A wrong layout must not be half-trusted: the repair plan depends on it.
            LOG_ERROR(kLog, cfg_.rank, "replica layout from rank " << m.rank << " refused: " << e.what());
            event_locked("replica_refused", "rank " + std::to_string(m.rank) + ": " + e.what());
        }
    }
}

void Controller::on_error(const ErrorReportMsg& m) {
    std::lock_guard<std::mutex> lock(mu_);
    heard_from_locked(m.rank);
    auto kind = fault_kind_of(static_cast<ReportState>(m.state));
    event_locked("report", "rank " + std::to_string(m.rank) + " state " + std::to_string(m.state) +
                               (m.error_code.empty() ? "" : " code " + m.error_code));
    if (static_cast<ReportState>(m.state) == ReportState::SubHealth) {
        note_sub_health_locked(m.rank, m.error_code);
        return;
    }
    if (static_cast<ReportState>(m.state) == ReportState::PrerepairFinish && ranks_[m.rank].joining) {
        ranks_[m.rank].ready = true;  // "ARF FINISH": the restarted process waits for REBUILD_GROUP
        event_locked("replacement_ready", "rank " + std::to_string(m.rank));
        cv_.notify_all();
    }
    if (!kind) return;
    ranks_[m.rank].run = RunStatus::Faulted;
    CodedReport coded{m.state, m.error_code};
    add_fault_locked(m.rank, *kind, "reported state " + std::to_string(m.state) + " " + m.error_code,
                     m.error_code.empty() ? nullptr : &coded);
}

void Controller::note_sub_health_locked(int rank, const std::string& code) {
    auto& codes = ranks_[rank].sub_health;
    if (std::find(codes.begin(), codes.end(), code) != codes.end()) return;
    codes.push_back(code);
    const std::string domain = ranks_[rank].domain.empty() ? "" : " (node " + ranks_[rank].domain + ")";
    LOG_WARN(kLog, cfg_.rank, "rank " << rank << domain << " reported sub-health: " << code
                                      << "; training goes on, the rank is flagged sub-healthy");
    event_locked("sub_health", "rank " + std::to_string(rank) + domain + ": " + code);
}

void Controller::on_reply(uint64_t seq, const ActionReplyMsg& m) {
    std::lock_guard<std::mutex> lock(mu_);
    heard_from_locked(m.rank);
    actions_.on_reply_locked(seq, m);
}

void Controller::on_goodbye(const GoodbyeMsg& m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ranks_.mark_left(m.rank)) return;
    event_locked("left", "rank " + std::to_string(m.rank) + ": " + m.reason);
    LOG_INFO(kLog, cfg_.rank, "rank " << m.rank << " left: " << m.reason);
    cv_.notify_all();  // an action waiting for its reply stops waiting
}

bool Controller::on_closed_locked(uint64_t conn, const std::string& reason) {
    if (leadership_.candidates().drop_conn(conn)) {
        LOG_INFO(kLog, cfg_.rank, "idle backup: a registration it held for a majority closed: " << reason);
        return true;
    }
    int rank = ranks_.rank_of_conn(conn);
    if (rank < 0) return false;
    if (!ranks_.disconnect(conn)) return true;
    // A dead rank's connection closing is no news (its death was said); a rank handed over is dead from its EXIT on.
    if (!ranks_[rank].left && !ranks_[rank].dead && state_ != State::Exit && state_ != State::Final && leadership_.may_lead()) {
        LOG_WARN(kLog, cfg_.rank, "lost the connection of rank " << rank << ": " << reason);
    }
    cv_.notify_all();
    return true;
}

}  // namespace mindio
