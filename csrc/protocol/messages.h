// Message bodies and their binary codec. Integers are little-endian; a string is u32 length + bytes;
// a list is u32 count + items. Every read is bounds-checked against the bytes left, every enum against
// its range, and a body must be consumed exactly: anything else is a ProtocolError naming the field.
// Each message's fields are listed once, in the field tables of messages.cpp, which drive both directions.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/frame.h"

namespace mindio {

enum class DataStatus : uint8_t { Updated = 0, Updating = 1, Copying = 2 };
constexpr uint8_t kMaxDataStatus = 2;
// Finished: the rank's training is over (last step, final save and evaluation done): the job has
// completed, and a fault reported after it is not acted on.
enum class RunStatus : uint8_t { Running = 0, Faulted = 1, Stopped = 2, Paused = 3, Finished = 4 };
constexpr uint8_t kMaxRunStatus = 4;
// The controller's choice after a fault; also what tft_get_repair_type() reports.
// ScaleIn is never a decision of its own: with elastic training on, it replaces the dump a process
// replacement falls back to when no replacement arrived in time (the job goes on at a smaller DP).
// ScaleOut neither: the controller starts it when the ranks a scale-in retired are back and ready.
// HotSwitch: a live rank handed over to a new process at a step boundary (controller_hot_switch.cpp); its EXIT
// tells the leaving process that it leaves on purpose, for a replacement its launcher starts.
enum class Strategy : uint8_t { None = 0, Retry = 1, Recover = 2, Dump = 3, Exit = 4, ScaleIn = 5, ScaleOut = 6, HotSwitch = 7 };
constexpr uint8_t kMaxStrategy = 7;
// What a rank's training thread is doing, timed against a limit the rank derives from its own history
// (the hang rule): the controller judges a hang from these, not from a silent heartbeat alone.
// Startup: from the processor's start to the train loop (model, optimizer, checkpoint load, data).
enum class Section : uint8_t { None = 0, Step = 1, Save = 2, Eval = 3, Startup = 4 };
constexpr uint8_t kMaxSection = 4;
const char* section_name(Section s);
// The section called `name` ("none", "step", "save", "eval"), or nothing.
std::optional<Section> parse_section(const std::string& name);

enum class ActionKind : uint16_t {
    Stop = 1, Clean = 2, Repair = 3, Rollback = 4, RebuildGroup = 5, SaveCkpt = 6, Rename = 7,
    Exit = 8, Normal = 9, Pause = 10, Continue = 11,
    // PRELOCK(step): no new optimizer update may start; a rank behind `step` may finish its current one.
    Prelock = 12,
};
constexpr uint16_t kMaxActionKind = 12;
const char* action_name(ActionKind kind);
const char* strategy_name(Strategy s);

struct RegisterMsg {
    int32_t rank = 0;
    int32_t world_size = 0;
    uint32_t heartbeat_ms = 0;
    std::string token;
    // A process started again for a rank that died (ARF): the controller accepts it only for a rank
    // it holds dead, and keeps it out of the job until the replacement is repaired.
    bool restarted = false;
    // The process's id, so that a launcher's report of a process that ended names this process and
    // not a replacement registered for the same rank since; 0: not given.
    int32_t pid = 0;
    // The process registers for the first time and may replace a dead rank (enable_arf) without the
    // launcher's marker: the controller decides, and says so in the reply, as the reference's controller
    // tells a rebooted process (tft_is_reboot_node).
    bool may_replace = false;
    // The highest controller term this processor has registered under (0: none yet). A controller that
    // took over has a higher term than the one it replaced; one that sees a higher term than its own
    // has been replaced, and must not act.
    uint64_t term = 0;
    // The last action (ActionKind) of a recovery the rank is still inside (from its PRELOCK to the
    // NORMAL or EXIT that ends it); 0: none. A controller that took over learns from it that the
    // controller it replaced died mid-recovery, and how far that recovery had come.
    uint16_t recovery_action = 0;
    // Proof that the process of the controller of `term` is gone: after the link to it broke, its address
    // refused a connection (its host answered, nothing listens there). A silence (a timeout, no route to
    // the host) is no proof: the controller may be alive and leading the ranks on the other side of a
    // partition. An idle backup leads on one such proof, otherwise only a majority (controller/election.h).
    bool leader_gone = false;
    // How many controllers the processor's list names (the leader and its backups). A leader whose ranks
    // name backups holds a lease (controller/lease.h): another controller may lead beside it.
    uint16_t controllers = 0;
};

// RegisterAck results besides 0 (accepted) and 1 (refused: the processor gives up, e.g. a wrong token):
// this controller does not lead the job (it was replaced); the processor tries the next of its list.
constexpr int32_t kNotTheLeader = 2;
// An idle backup that the rule (controller/election.h) does not let lead yet: the connection stays open
// and a second RegisterAck follows, 0 when a majority (or a proof) came in time, else kNoMajority.
constexpr int32_t kAwaitingMajority = 3;
// The backup's wait for a majority ended without one: this rank and those that reached the same backup
// are a minority cut off from the leader; the processor tries its list once more, then leaves the job.
constexpr int32_t kNoMajority = 4;
// A restarted process refused while the controller ends the job (its dump, its exit): there is nothing to join
// and nothing to try again; the process ends as the job's other ranks do (ENDED_BY_CONTROLLER).
constexpr int32_t kJobEnding = 5;

struct RegisterAckMsg {
    int32_t result = 0;  // 0 accepted; otherwise refused and `message` says why
    std::string message;
    bool replacement = false;  // accepted in place of a dead rank (ARF)
    uint64_t term = 1;  // the controller's term: 1 for the first, one more for each takeover
};

// Heartbeat and Status share this body.
struct RankStatusMsg {
    int32_t rank = 0;
    int64_t step = -1;  // last step whose optimizer update completed
    RunStatus run_status = RunStatus::Running;
    DataStatus data_status = DataStatus::Updated;
    int64_t ckpt_step = -1;  // step of the last periodic checkpoint this rank saved (can load again); -1 none
    Section section = Section::None;
    int64_t section_ms = 0;  // how long the section had run when this was sent
    int64_t limit_ms = 0;    // the section's time limit; 0: none
    uint64_t progress = 0;   // work done in the section so far (micro-batch forwards and backwards)
    // The last completed step's compute: from its section's start to its last forward or backward, before
    // its gradients were synced (controller/slow_ranks.h); -1: not measured.
    int64_t compute_ms = -1;
};

struct ReplicaGroupMsg {
    uint8_t optimizer_type = 0;
    int32_t replica_cnt = 1;
    int32_t replica_shift = 0;
    std::vector<int32_t> ranks;
};

struct ReplicaInfoMsg {
    int32_t rank = 0;
    std::vector<ReplicaGroupMsg> groups;
    // The reporting rank's failure domain (its node), so that the controller knows which holders of a
    // shard share one; empty: not said. Logged and shown, so short printable ASCII.
    std::string domain;
};
constexpr size_t kMaxDomain = 256;

// The reference's ReportState values, and ours after them. SubHealth: the rank's hardware is suspect
// (the error code says why, e.g. silent data corruption) and training goes on: not a fault.
enum class ReportState : uint8_t {
    Normal = 0, Retry = 1, Uce = 2, UceCorrupted = 3, HcclFailed = 4, InitFinish = 5, PrerepairFinish = 6,
    StepFinish = 7, Unknown = 8, SubHealth = 9,
};
constexpr uint8_t kMaxReportState = 9;

struct ErrorReportMsg {
    int32_t rank = 0;
    uint8_t state = 0;  // ReportState value
    std::string error_code;  // a device fault code such as "80E01801", or empty; see check_error_code
};

// An error code goes into logs and to the fault policy, so it is short printable ASCII; a device
// fault code is 8 hex digits, and the bound leaves room for other vendors' longer names.
constexpr size_t kMaxErrorCode = 64;
// Empty when `code` is acceptable, otherwise what is wrong with it.
std::string check_error_code(const std::string& code);

// What a rank does in a REPAIR, with the reference's values (mindio_adaptor/core/detection/enums.py RepairType):
// SEND for a source; a receiver is UCE_HIGHLEVEL or UCE_LOWLEVEL (its clean said the memory error
// needs no rebuild) when repaired in place, RECV_REPAIR when it is a replacement process; LOAD_CKPT:
// reload the last periodic checkpoint. ROLLBACK and LOAD_REBUILD exist for the names; never sent.
enum class RepairType : uint8_t {
    Send = 0, UceHighLevel = 1, UceLowLevel = 2, RecvRepair = 3, Rollback = 4, LoadCkpt = 5, LoadRebuild = 6,
};
constexpr uint8_t kMaxRepairType = 6;

struct RepairInfoMsg {
    uint8_t optimizer_type = 0;
    uint8_t repair_type = 0;  // RepairType of the receiving rank (a wire byte: a peer may send any value)
    std::vector<int32_t> src, dst, rank_list;
};

struct SaveInfoMsg {
    uint8_t optimizer_type = 0;
    std::vector<int32_t> ranks;
};

struct ActionMsg {
    ActionKind kind = ActionKind::Stop;
    Strategy strategy = Strategy::None;
    int64_t step = -1;
    bool need_rebuild = false;
    bool is_uce = false;
    std::vector<int32_t> error_ranks;
    std::vector<RepairInfoMsg> repair;
    std::vector<SaveInfoMsg> save;
    // REBUILD_GROUP of a partial scale-out: the retired ranks that stay out (error_ranks: those that return)
    std::vector<int32_t> absent_ranks;
};

struct ActionReplyMsg {
    int32_t rank = 0;
    ActionKind kind = ActionKind::Stop;
    int32_t result = 0;  // 0 ok; non-zero is the handler's failure code
    std::string message;
};

// Sent just before closing on purpose: by a processor at tft_destroy_processor (rank = its rank), by
// the controller when it is destroyed (rank = the controller's rank, -1 when standalone). The peer
// then logs a departure instead of a lost connection, and the controller counts no fault.
struct GoodbyeMsg {
    int32_t rank = 0;
    std::string reason;
};
// The reason is logged, so it is short printable ASCII.
constexpr size_t kMaxGoodbyeReason = 256;

// Sent by the launcher of a rank's node when the rank's process ended (its exit code or signal in
// `how`), on a connection of its own that carries the job's token. A process's death is otherwise
// seen as its closed connection; this report is the OS's word for it, and still arrives when the
// connection outlives the process (a child that inherited the descriptor keeps it open).
struct ProcessEndedMsg {
    std::string token;
    int32_t rank = 0;
    int32_t pid = 0;
    std::string how;  // logged: short printable ASCII, at most kMaxGoodbyeReason
};

// Sent by the launcher that watches the other nodes (node 0's) when a node's launcher is proven gone and
// no standby waits to take its place: its ranks will not come back unless a new launcher is started for
// that node. With elastic training the controller then scales in without them at once rather than wait
// out MINDIO_ARF_WAIT_S, and grows back when they return. Answered with a ProcessEndedAck.
struct NoReplacementMsg {
    std::string token;
    std::vector<int32_t> ranks;
    std::string why;  // logged: short printable ASCII, at most kMaxGoodbyeReason
};

// The ProcessEndedAck result for a rank that had said goodbye (its training over) before its process
// ended: the launcher does not start it again. 0 is a report taken, 1 one refused.
constexpr int32_t kProcessEndedAfterLeaving = 2;

// The CLEAN reply of a rank whose memory error needs no rebuild: no failure; it is then repaired in place
// as UCE_LOWLEVEL rather than UCE_HIGHLEVEL (RepairType).
constexpr int32_t kCleanNeedsNoRebuild = 2;

// The REBUILD_GROUP reply of a rank that a scale-in drops with its data-parallel slice (a peer of the
// slice was lost): no failure, it leaves the job, which goes on without it (docs/elastic.md).
constexpr int32_t kLeavesTheJob = 3;

std::string encode(const RegisterMsg& m);
std::string encode(const RegisterAckMsg& m);
std::string encode(const RankStatusMsg& m);
std::string encode(const ReplicaInfoMsg& m);
std::string encode(const ErrorReportMsg& m);
std::string encode(const ActionMsg& m);
std::string encode(const ActionReplyMsg& m);
std::string encode(const GoodbyeMsg& m);
std::string encode(const ProcessEndedMsg& m);
std::string encode(const NoReplacementMsg& m);

void decode(const std::string& body, RegisterMsg& m);
void decode(const std::string& body, RegisterAckMsg& m);
void decode(const std::string& body, RankStatusMsg& m);
void decode(const std::string& body, ReplicaInfoMsg& m);
void decode(const std::string& body, ErrorReportMsg& m);
void decode(const std::string& body, ActionMsg& m);
void decode(const std::string& body, ActionReplyMsg& m);
void decode(const std::string& body, GoodbyeMsg& m);
void decode(const std::string& body, ProcessEndedMsg& m);
void decode(const std::string& body, NoReplacementMsg& m);

template <typename Msg>
Msg decode_as(const std::string& body) {
    Msg m;
    decode(body, m);
    return m;
}

}  // namespace mindio
