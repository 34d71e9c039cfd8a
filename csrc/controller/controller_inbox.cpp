// The server thread's handlers: processors' frames, registrations, lost connections (members of Controller).
#include "common/log.h"
#include "controller/controller.h"
#include "controller/job_token.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

void Controller::on_frame(uint64_t conn, Frame&& frame) {
    try {
        if (frame.type == MsgType::Register) return handle_register(conn, frame.body);
        if (frame.type == MsgType::ProcessEnded) return handle_process_ended(conn, frame.body);
        if (frame.type == MsgType::NoReplacement) return handle_no_replacement(conn, frame.body);
        int rank;
        {
            std::lock_guard<std::mutex> lock(mu_);
            rank = ranks_.rank_of_conn(conn);
        }
        if (rank < 0) {
            std::lock_guard<std::mutex> lock(mu_);
            return refuse_unproven_locked(conn, "not a Register first",
                                          "expected Register first, got message type " + std::to_string(int(frame.type)));
        }
        auto check_rank = [&](int claimed) {
            if (claimed != rank) {
                throw ProtocolError("rank field " + std::to_string(claimed) + " does not match the registered rank " +
                                    std::to_string(rank));
            }
        };
        switch (frame.type) {
            case MsgType::Heartbeat:
            case MsgType::Status: {
                auto m = decode_as<RankStatusMsg>(frame.body);
                check_rank(m.rank);
                return handle_status(m, frame.type == MsgType::Heartbeat);
            }
            case MsgType::ReplicaInfo: {
                auto m = decode_as<ReplicaInfoMsg>(frame.body);
                check_rank(m.rank);
                return handle_replica(m);
            }
            case MsgType::ErrorReport: {
                auto m = decode_as<ErrorReportMsg>(frame.body);
                check_rank(m.rank);
                return handle_error(m);
            }
            case MsgType::ActionReply: {
                auto m = decode_as<ActionReplyMsg>(frame.body);
                check_rank(m.rank);
                return handle_reply(frame.seq, m);
            }
            case MsgType::Goodbye: {
                auto m = decode_as<GoodbyeMsg>(frame.body);
                check_rank(m.rank);
                return handle_goodbye(m);
            }
            default:
                throw ProtocolError("message type " + std::to_string(int(frame.type)) + " is not sent by processors");
        }
    } catch (const ProtocolError& e) {
        std::lock_guard<std::mutex> lock(mu_);
        if (ranks_.rank_of_conn(conn) < 0) return refuse_unproven_locked(conn, "undecodable frame", e.what());
        LOG_WARN(kLog, cfg_.rank, "closing connection " << conn << ": " << e.what());
        server_.close(conn, e.what());
    }
}

void Controller::refuse_unproven_locked(uint64_t conn, const std::string& kind, const std::string& detail) {
    if (refusals_.note(kind)) {
        LOG_WARN(kLog, cfg_.rank, "refused connection " << conn << ": " << detail
                                      << " (further refusals this period are counted, then summarised)");
    }
    server_.close(conn, "refused: " + kind);
}

void Controller::handle_register(uint64_t conn, const std::string& body) {
    auto m = decode_as<RegisterMsg>(body);
    // The token first: a peer without it learns nothing about the job (its size, ranks or processes).
    const bool proven = !cfg_.token.empty();
    if (proven && !tokens_equal(cfg_.token, m.token)) {
        server_.send(conn, encode_frame(MsgType::RegisterAck, 0, encode(RegisterAckMsg{1, kWrongToken, false, 0})));
        std::lock_guard<std::mutex> lock(mu_);
        ++registrations_refused_;
        return refuse_unproven_locked(conn, "wrong token", std::string("a registration with a ") + kWrongToken);
    }
    std::string refusal;
    if (m.world_size != cfg_.world_size) {
        refusal = "world size " + std::to_string(m.world_size) + " differs from the controller's " +
                  std::to_string(cfg_.world_size);
    } else if (m.rank < 0 || m.rank >= cfg_.world_size) {
        refusal = "rank " + std::to_string(m.rank) + " is out of range 0.." + std::to_string(cfg_.world_size - 1);
    } else if (m.heartbeat_ms < 10 || m.heartbeat_ms > 600000) {
        refusal = "heartbeat period " + std::to_string(m.heartbeat_ms) + " ms is out of range 10..600000";
    }
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
    if (refusal.empty()) refusal = ranks_.arf_refusal(m, state_);
    if (!refusal.empty()) {
        ++registrations_refused_;
        server_.send(conn, encode_frame(MsgType::RegisterAck, 0, encode(RegisterAckMsg{result, refusal, false, term_})));
        if (!proven) return refuse_unproven_locked(conn, "registration refused", "registration of rank " +
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
    if (m.controllers > 1) backups_listed_ = true;
    server_.authenticate(conn);
    server_.send(conn, encode_frame(MsgType::RegisterAck, 0, encode(RegisterAckMsg{0, "ok", replacing, term_})));
    const bool returning = replacing && r.retired;
    const char* kind = returning ? "returned" : replacing ? "replacement" : again ? "reregister" : "register";
    event_locked(kind, "rank " + std::to_string(m.rank));
    LOG_INFO(kLog, cfg_.rank, "rank " << m.rank << " "
                                  << (returning ? "returned after the scale-in (a restarted process): the job scales out "
                                                  "once every retired rank is back and ready"
                                      : replacing ? "replaced by a restarted process"
                                      : again     ? "re-registered"
                                                  : "registered"));
    cv_.notify_all();
}

std::string Controller::term_refusal_locked(const RegisterMsg& m) {
    if (!not_leading_.empty()) return "this controller (term " + std::to_string(term_) + ") " + not_leading_;
    // Only a rank that lost the controller it registered with asks a backup to lead (awaits_majority_locked).
    // A process that never registered (a replacement, or the job's first start reaching a backup before the
    // active one) would otherwise make an idle backup lead a part of the job beside the real leader.
    if (term_ == 0) return "a backup controller that leads no job yet: this process never registered (term 0)";
    if (m.term > term_) {
        supersede_locked(m.term);
        return "this controller (term " + std::to_string(term_) + ") was replaced by one of term " +
               std::to_string(m.term);
    }
    return "";
}

// A rank registered under a newer term: another controller took over. This one must not act on any
// rank again; its connections close, and their processors move on to the next controller of their list.
void Controller::supersede_locked(uint64_t newer) {
    event_locked("superseded", "term " + std::to_string(term_) + " replaced by term " + std::to_string(newer));
    LOG_ERROR(kLog, cfg_.rank, "this controller (term " << term_ << ") was replaced by a controller of term " << newer
                                   << ": it no longer acts, and closes its connections");
    stop_leading_locked("was replaced by a controller of term " + std::to_string(newer));
}

void Controller::stop_leading_locked(const std::string& why) {
    not_leading_ = why;
    for (size_t rank = 0; rank < ranks_.size(); ++rank) {
        if (ranks_[rank].connected) server_.close(ranks_[rank].conn, "this controller " + why);
    }
    pending_faults_.clear();
}

// Marks `m.rank` as joining when `m` is a restarted process taking a dead rank's place; returns whether
// it is. A rank whose connection closed but that was not yet declared dead is declared dead now.
// After a takeover, a restarted process for a rank not registered here replaces it as well: that
// rank's process died before or with the old controller. So does a process that may replace and never
// registered with any controller: every process of the job registered with the one that was lost.
bool Controller::accept_replacement_locked(const RegisterMsg& m) {
    const RankEntry& r = ranks_[m.rank];
    const bool after_takeover = took_over_ && !r.registered && cfg_.caps.recover &&
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

void Controller::handle_status(const RankStatusMsg& m, bool heartbeat) {
    std::lock_guard<std::mutex> lock(mu_);
    heard_from_locked(m.rank);
    if (m.step > ranks_[m.rank].step) slow_.record(m.rank, m.step, m.compute_ms);  // once per step, not per beat
    if (ranks_.apply_status(m)) note_finished_locked(m.rank);
    if (heartbeat) ++heartbeats_;
    else cv_.notify_all();
}

// The first rank to finish means every collective of the training is done: the job has completed.
void Controller::note_finished_locked(int rank) {
    if (finished_rank_ >= 0) return;
    finished_rank_ = rank;
    observe_goodput_locked();  // the last step's completion, then the end of the accounting
    goodput_.finish(Clock::now());
    event_locked("finished", "rank " + std::to_string(rank));
    LOG_INFO(kLog, cfg_.rank, "rank " << rank << " finished training: the job has completed, a later fault is not acted on");
}

void Controller::handle_replica(const ReplicaInfoMsg& m) {
    std::lock_guard<std::mutex> lock(mu_);
    heard_from_locked(m.rank);
    ranks_[m.rank].domain = m.domain;
    if (ranks_[m.rank].retired && !relayout_) {
        // A process returned for a rank the scale-in retired reports the layout of the job it rejoins,
        // not of the smaller one running now; it reports it again at the scale-out's REBUILD_GROUP.
        event_locked("replica_deferred", "rank " + std::to_string(m.rank) + ": returned, reports again at the scale-out");
        return;
    }
    if (relayout_) relayout_reporters_.insert(m.rank);
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

void Controller::handle_error(const ErrorReportMsg& m) {
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

void Controller::handle_reply(uint64_t seq, const ActionReplyMsg& m) {
    std::lock_guard<std::mutex> lock(mu_);
    heard_from_locked(m.rank);
    actions_.on_reply_locked(seq, m);
}

void Controller::handle_goodbye(const GoodbyeMsg& m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ranks_.mark_left(m.rank)) return;
    event_locked("left", "rank " + std::to_string(m.rank) + ": " + m.reason);
    LOG_INFO(kLog, cfg_.rank, "rank " << m.rank << " left: " << m.reason);
    cv_.notify_all();  // an action waiting for its reply stops waiting
}

void Controller::on_closed(uint64_t conn, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (candidates_.drop_conn(conn)) {
        LOG_INFO(kLog, cfg_.rank, "idle backup: a registration it held for a majority closed: " << reason);
        return;
    }
    int rank = ranks_.rank_of_conn(conn);
    if (rank < 0) {
        // Refusals were counted where they were decided; what the transport decided is counted here.
        static const char* const decided[] = {"connection closed by peer", "refused: ", "registration refused: ",
                                              "process-ended report answered"};
        for (const char* prefix : decided) {
            if (reason.rfind(prefix, 0) == 0) return;
        }
        if (refusals_.note(reason.substr(0, reason.find(':')))) {
            LOG_WARN(kLog, cfg_.rank, "connection " << conn << " closed: " << reason
                                          << " (further ones this period are counted, then summarised)");
        }
        return;
    }
    if (!ranks_.disconnect(conn)) return;
    // A dead rank's connection closing is no news (its death was said); a rank handed over is dead from its EXIT on.
    if (!ranks_[rank].left && !ranks_[rank].dead && state_ != State::Exit && state_ != State::Final && not_leading_.empty()) {
        LOG_WARN(kLog, cfg_.rank, "lost the connection of rank " << rank << ": " << reason);
    }
    cv_.notify_all();
}

}  // namespace mindio
