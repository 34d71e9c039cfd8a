// The controller's part in an idle backup's election (election.h): the registrations it holds while no
// majority and no proof lets it lead, the takeover when the rule lets it, and the held registrations
// refused once their wait is over. Members of Controller, under its lock, kept out of controller.cpp.
#include "common/log.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

// A rank that lost its controller registers with an idle backup. When the rule lets the backup lead (a
// proof that the leader's process is gone, or a strict majority of the ranks), it takes over and takes
// in every registration it held (the caller registers this one); otherwise it holds this one open,
// answered "awaiting a majority", for MINDIO_TAKEOVER_WAIT_S at most (expire_candidates_locked).
bool Controller::awaits_majority_locked(uint64_t conn, const RegisterMsg& m) {
    if (!leadership_.idle_backup() || !leadership_.may_lead() || m.term == 0) return false;
    uint64_t replaced =
        leadership_.candidates().add(conn, m, Clock::now() + std::chrono::milliseconds(cfg_.takeover_wait_ms));
    if (replaced != 0) server_.close(replaced, "registration refused: rank " + std::to_string(m.rank) + " registered again");
    ElectionVerdict verdict = judge_election(cfg_.world_size, leadership_.candidates().view());
    if (!verdict.lead) {
        server_.authenticate(conn);  // held past the registration deadline, until the verdict
        server_.send(conn, encode_frame(MsgType::RegisterAck, 0,
                                        encode(RegisterAckMsg{kAwaitingMajority, verdict.why, false, 0})));
        event_locked("candidate", "rank " + std::to_string(m.rank) + ": " + verdict.why);
        LOG_WARN(kLog, cfg_.rank, "idle backup: rank " << m.rank << " registered, last under term " << m.term << ": "
                                      << verdict.why << "; its registration is held up to " << cfg_.takeover_wait_ms
                                      << " ms (MINDIO_TAKEOVER_WAIT_S) for a majority");
        return true;
    }
    take_over_locked(verdict);
    for (auto& held : leadership_.candidates().take_all()) {
        if (held.conn != conn) register_locked(held.conn, std::move(held.msg), "");
    }
    return false;
}

void Controller::take_over_locked(const ElectionVerdict& verdict) {
    leadership_.take_over(verdict.term, cfg_.takeover_wait_ms);
    actions_.begin_term_locked(verdict.term);
    event_locked("term", std::to_string(verdict.term) + ": " + verdict.why);
    LOG_WARN(kLog, cfg_.rank, "backup controller taking over as term " << verdict.term << ": " << verdict.why);
    LOG_INFO(kLog, cfg_.rank, "waiting up to " << cfg_.takeover_wait_ms << " ms (MINDIO_TAKEOVER_WAIT_S) for the "
                                               "other ranks to register with term " << verdict.term);
}

// Registrations held past their deadline without a majority: refused with kNoMajority, so that their
// processors learn they are a minority cut off from the leader.
void Controller::expire_candidates_locked() {
    if (leadership_.candidates().empty()) return;
    auto expired = leadership_.candidates().take_expired(Clock::now());
    if (expired.empty()) return;
    std::vector<Candidate> all = leadership_.candidates().view();
    for (const auto& e : expired) all.push_back({e.msg.rank, e.msg.term, e.msg.leader_gone});
    const std::string why = "no majority within " + std::to_string(cfg_.takeover_wait_ms) +
                            " ms (MINDIO_TAKEOVER_WAIT_S): " + judge_election(cfg_.world_size, all).why +
                            "; this backup does not lead";
    for (const auto& e : expired) {
        inbox_.note_refused_registration();
        server_.send(e.conn, encode_frame(MsgType::RegisterAck, 0, encode(RegisterAckMsg{kNoMajority, why, false, 0})));
        server_.close(e.conn, "registration refused: no majority");
        event_locked("no_majority", "rank " + std::to_string(e.msg.rank) + ": " + why);
        LOG_WARN(kLog, cfg_.rank, "idle backup: rank " << e.msg.rank << " sent away: " << why);
    }
}

}  // namespace mindio
