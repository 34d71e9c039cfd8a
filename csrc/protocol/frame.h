// The frame: a fixed 24-byte little-endian header followed by the body.
//
//   offset 0  u32 magic   'MIOA'
//          4  u16 version
//          6  u16 type    (MsgType)
//          8  u64 seq     action sequence number (0 for messages that are not actions or replies)
//         16  u32 body_len, at most kMaxBody
//         20  u32 crc32 of the body
//
// The header carries no checksum of its own: a damaged header fails the magic, version, type or length
// check, or desynchronises the stream so that the body CRC fails; either way the connection is closed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mindio {

constexpr uint32_t kMagic = 0x414F494D;  // "MIOA" in little-endian bytes
constexpr uint16_t kVersion = 13;  // 2: status carries the section, its limit and progress; 3: pids, ProcessEnded;
                                  // 4: Register's may_replace, RegisterAck's replacement;
                                  // 5: the controller's term in Register and RegisterAck, ReplicaInfo's domain;
                                  // 6: Register's recovery_action (a recovery in progress at a takeover);
                                  // 7: Register's leader_gone, RegisterAck's results 3 and 4 (a backup
                                  //    leads only a majority without proof that the leader is gone);
                                  // 8: Register's controllers (a leader whose ranks list backups holds a lease)
                                  // 9: NoReplacement (a lost node's ranks that nothing will replace)
                                  // 10: RankStatus's compute_ms (the slow-rank signal)
                                  // 11: ErrorReport's state SUB_HEALTH (9): a suspect rank, not a fault
                                  // 12: Strategy HOT_SWITCH (7): a live rank handed over to a new process
                                  // 13: Action's absent_ranks (a partial scale-out's ranks that stay out)
constexpr size_t kHeaderSize = 24;
constexpr uint32_t kMaxBody = 10u * 1024u * 1024u;

enum class MsgType : uint16_t {
    Register = 1,      // processor -> controller: rank, world size, token
    RegisterAck = 2,   // controller -> processor: accepted or refused with a reason
    Heartbeat = 3,     // processor -> controller: rank status, every heartbeat period
    Status = 4,        // processor -> controller: start/end of an optimizer update, sent at once
    ReplicaInfo = 5,   // processor -> controller: its replica rank lists
    ErrorReport = 6,   // processor -> controller: a fault seen by the training loop
    Action = 7,        // controller -> processor: run one handler
    ActionReply = 8,   // processor -> controller: the handler's result (seq = the action's seq)
    Goodbye = 9,       // either way: the sender closes the link on purpose (not a fault)
    ProcessEnded = 10,     // a launcher -> controller, on a connection of its own: a rank's process ended
    ProcessEndedAck = 11,  // controller -> launcher: what a launcher's report changed (RegisterAckMsg's body)
    NoReplacement = 12,    // a launcher -> controller, on a connection of its own: ranks nothing will replace
};
constexpr uint16_t kMinMsgType = 1;
constexpr uint16_t kMaxMsgType = 12;

struct ProtocolError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Frame {
    MsgType type{};
    uint64_t seq = 0;
    std::string body;
};

uint32_t crc32(const void* data, size_t len);
std::string encode_frame(MsgType type, uint64_t seq, const std::string& body);

// Incremental parser for a byte stream. feed() appends bytes; next() yields complete frames and
// throws ProtocolError (with the reason) at the first malformed header or checksum.
class FrameParser {
public:
    void feed(const char* data, size_t len) { buffer_.append(data, len); }
    bool next(Frame& out);
    size_t buffered() const { return buffer_.size() - offset_; }
    // The largest body a header may announce (kMaxBody unless lowered, e.g. before a peer registers).
    void set_max_body(uint32_t max_body) { max_body_ = max_body; }

private:
    std::string buffer_;
    uint32_t max_body_ = kMaxBody;
    size_t offset_ = 0;
};

// Decodes exactly one frame from `bytes` (no trailing bytes allowed).
Frame decode_frame(const std::string& bytes);

}  // namespace mindio
