#include "controller/inbox.h"

#include <algorithm>

#include "common/log.h"
#include "controller/job_token.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

void Inbox::on_frame(uint64_t conn, Frame&& frame) {
    try {
        if (frame.type == MsgType::Register) return take_register(conn, frame.body);
        if (frame.type == MsgType::ProcessEnded) return take_process_ended(conn, frame.body);
        if (frame.type == MsgType::NoReplacement) return take_no_replacement(conn, frame.body);
        dispatch(conn, frame);
    } catch (const ProtocolError& e) {
        std::lock_guard<std::mutex> lock(mu_);
        if (ranks_.rank_of_conn(conn) < 0) return refuse_unproven_locked(conn, "undecodable frame", e.what());
        LOG_WARN(kLog, log_rank_, "closing connection " << conn << ": " << e.what());
        server_.close(conn, e.what());
    }
}

// A registered processor's frame, for the rank it registered as.
void Inbox::dispatch(uint64_t conn, const Frame& frame) {
    int rank;
    {
        std::lock_guard<std::mutex> lock(mu_);
        rank = ranks_.rank_of_conn(conn);
        if (rank < 0) {
            return refuse_unproven_locked(conn, "not a Register first",
                                          "expected Register first, got message type " + std::to_string(int(frame.type)));
        }
    }
    auto for_this_rank = [&](auto m) {
        if (m.rank != rank) {
            throw ProtocolError("rank field " + std::to_string(m.rank) + " does not match the registered rank " +
                                std::to_string(rank));
        }
        return m;
    };
    switch (frame.type) {
        case MsgType::Heartbeat:
            host_.on_status(for_this_rank(decode_as<RankStatusMsg>(frame.body)), true);
            ++heartbeats_;
            return;
        case MsgType::Status: return host_.on_status(for_this_rank(decode_as<RankStatusMsg>(frame.body)), false);
        case MsgType::ReplicaInfo: return host_.on_replica(for_this_rank(decode_as<ReplicaInfoMsg>(frame.body)));
        case MsgType::ErrorReport: return host_.on_error(for_this_rank(decode_as<ErrorReportMsg>(frame.body)));
        case MsgType::ActionReply: return host_.on_reply(frame.seq, for_this_rank(decode_as<ActionReplyMsg>(frame.body)));
        case MsgType::Goodbye: return host_.on_goodbye(for_this_rank(decode_as<GoodbyeMsg>(frame.body)));
        default: throw ProtocolError("message type " + std::to_string(int(frame.type)) + " is not sent by processors");
    }
}

void Inbox::refuse_unproven_locked(uint64_t conn, const std::string& kind, const std::string& detail) {
    if (refusals_.note(kind)) {
        LOG_WARN(kLog, log_rank_, "refused connection " << conn << ": " << detail
                                      << " (further refusals this period are counted, then summarised)");
    }
    server_.close(conn, "refused: " + kind);
}

// The token first: a peer without it learns nothing about the job (its size, ranks or processes).
bool Inbox::proves_token(uint64_t conn, const std::string& token, MsgType answer, const char* what) {
    if (token_.empty() || tokens_equal(token_, token)) return true;
    RegisterAckMsg refused{1, kWrongToken};
    if (answer == MsgType::RegisterAck) refused.term = 0;  // as an idle backup's: no term is told to a stranger
    server_.send(conn, encode_frame(answer, 0, encode(refused)));
    std::lock_guard<std::mutex> lock(mu_);
    if (answer == MsgType::RegisterAck) note_refused_registration();
    refuse_unproven_locked(conn, "wrong token", std::string("a ") + what + " with a " + kWrongToken);
    return false;
}

std::string Inbox::out_of_range(int rank) const {
    if (rank >= 0 && rank < world_size_) return "";
    return "rank " + std::to_string(rank) + " is out of range 0.." + std::to_string(world_size_ - 1);
}

void Inbox::take_register(uint64_t conn, const std::string& body) {
    auto m = decode_as<RegisterMsg>(body);
    if (!proves_token(conn, m.token, MsgType::RegisterAck, "registration")) return;
    std::string refusal = m.world_size != world_size_ ? "world size " + std::to_string(m.world_size) +
                                                            " differs from the controller's " + std::to_string(world_size_)
                                                      : out_of_range(m.rank);
    if (refusal.empty() && (m.heartbeat_ms < 10 || m.heartbeat_ms > 600000)) {
        refusal = "heartbeat period " + std::to_string(m.heartbeat_ms) + " ms is out of range 10..600000";
    }
    host_.on_register(conn, std::move(m), refusal);
}

void Inbox::answer_launcher(uint64_t conn, int32_t result, const std::string& answer) {
    server_.send(conn, encode_frame(MsgType::ProcessEndedAck, 0, encode(RegisterAckMsg{result, answer})));
    server_.close(conn, "launcher's report answered");
}

void Inbox::take_process_ended(uint64_t conn, const std::string& body) {
    auto m = decode_as<ProcessEndedMsg>(body);
    if (!proves_token(conn, m.token, MsgType::ProcessEndedAck, "process-ended report")) return;
    const std::string refusal = out_of_range(m.rank);
    if (refusal.empty()) return host_.on_process_ended(conn, m);
    LOG_WARN(kLog, log_rank_, "refused a report that rank " << m.rank << "'s process " << m.pid << " ended: " << refusal);
    answer_launcher(conn, 1, refusal);
}

void Inbox::take_no_replacement(uint64_t conn, const std::string& body) {
    auto m = decode_as<NoReplacementMsg>(body);
    if (!proves_token(conn, m.token, MsgType::ProcessEndedAck, "no-replacement report")) return;
    auto stray = std::find_if(m.ranks.begin(), m.ranks.end(), [&](int32_t r) { return !out_of_range(r).empty(); });
    if (!m.ranks.empty() && stray == m.ranks.end()) return host_.on_no_replacement(conn, m);
    const std::string refusal = m.ranks.empty() ? "it names no rank" : out_of_range(*stray);
    LOG_WARN(kLog, log_rank_, "refused a report that ranks will not be replaced: " << refusal);
    answer_launcher(conn, 1, refusal);
}

void Inbox::on_closed(uint64_t conn, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (host_.on_closed_locked(conn, reason)) return;
    // Refusals were counted where they were decided; what the transport decided is counted here.
    static const char* const decided[] = {"connection closed by peer", "refused: ", "registration refused: ",
                                          "process-ended report answered"};
    for (const char* prefix : decided) {
        if (reason.rfind(prefix, 0) == 0) return;
    }
    if (refusals_.note(reason.substr(0, reason.find(':')))) {
        LOG_WARN(kLog, log_rank_, "connection " << conn << " closed: " << reason
                                      << " (further ones this period are counted, then summarised)");
    }
}

}  // namespace mindio
