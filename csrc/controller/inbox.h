// The controller's side of the server thread: every frame a peer sends is decoded and checked here first
// (the job's token, the shape of a registration or of a launcher's report, that a processor speaks for the
// rank it registered as) and handed to the host as a typed message. A peer that did not prove the token is
// refused at its first bad frame, counted and logged in aggregate (refusal_tally.h); a registered one that
// breaks the protocol is closed. The host's handlers take the controller's lock; the inbox takes it only to
// read who a connection is and to count.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "controller/rank_table.h"
#include "controller/refusal_tally.h"
#include "net/server.h"
#include "protocol/messages.h"

namespace mindio {

class InboxHost {
public:
    virtual ~InboxHost() = default;
    // A registration with the job's token; `refusal` non-empty: refused for the job's shape regardless.
    virtual void on_register(uint64_t conn, RegisterMsg m, const std::string& refusal) = 0;
    virtual void on_status(const RankStatusMsg& m, bool heartbeat) = 0;
    virtual void on_replica(const ReplicaInfoMsg& m) = 0;
    virtual void on_error(const ErrorReportMsg& m) = 0;
    virtual void on_reply(uint64_t seq, const ActionReplyMsg& m) = 0;
    virtual void on_goodbye(const GoodbyeMsg& m) = 0;
    // A launcher's reports, with the token and every rank in range; the host answers (Inbox::answer_launcher).
    virtual void on_process_ended(uint64_t conn, const ProcessEndedMsg& m) = 0;
    virtual void on_no_replacement(uint64_t conn, const NoReplacementMsg& m) = 0;
    // Under the controller's lock: true when the closed connection was a rank's or a held registration's.
    virtual bool on_closed_locked(uint64_t conn, const std::string& reason) = 0;
};

class Inbox : public Server::Listener {
public:
    Inbox(InboxHost& host, Server& server, std::mutex& mu, const RankTable& ranks, std::string token, int world_size,
          int log_rank)
        : host_(host), server_(server), mu_(mu), ranks_(ranks), token_(std::move(token)), world_size_(world_size),
          log_rank_(log_rank) {}

    void on_frame(uint64_t conn, Frame&& frame) override;
    void on_closed(uint64_t conn, const std::string& reason) override;

    // Under the controller's lock: a peer that did not prove the token is refused and counted.
    void refuse_unproven_locked(uint64_t conn, const std::string& kind, const std::string& detail);
    std::string refusal_summary_due_locked(RefusalTally::Clock::time_point now) { return refusals_.summary_due(now); }
    uint64_t refused_unproven_locked() const { return refusals_.total(); }
    // A registration answered with a refusal, here or by the host (the term, the election, a replacement).
    void note_refused_registration() { ++registrations_refused_; }
    uint64_t refused_registrations() const { return registrations_refused_; }
    uint64_t heartbeats() const { return heartbeats_; }
    // A launcher's report is answered on its own connection, which then closes.
    void answer_launcher(uint64_t conn, int32_t result, const std::string& answer);

private:
    void dispatch(uint64_t conn, const Frame& frame);
    void take_register(uint64_t conn, const std::string& body);
    void take_process_ended(uint64_t conn, const std::string& body);
    void take_no_replacement(uint64_t conn, const std::string& body);
    bool proves_token(uint64_t conn, const std::string& token, MsgType answer, const char* what);
    std::string out_of_range(int rank) const;  // "" when `rank` is a rank of the job

    InboxHost& host_;
    Server& server_;
    std::mutex& mu_;
    const RankTable& ranks_;
    const std::string token_;
    const int world_size_;
    const int log_rank_;
    RefusalTally refusals_;  // under mu_
    std::atomic<uint64_t> registrations_refused_{0}, heartbeats_{0};
};

}  // namespace mindio
