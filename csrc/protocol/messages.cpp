#include "protocol/messages.h"

namespace mindio {
namespace {

constexpr uint32_t kMaxString = 64 * 1024;

class Writer {
public:
    void u8(uint8_t v) { raw(v, 1); }
    void u16(uint16_t v) { raw(v, 2); }
    void u32(uint32_t v) { raw(v, 4); }
    void i32(int32_t v) { raw(static_cast<uint32_t>(v), 4); }
    void i64(int64_t v) { raw(static_cast<uint64_t>(v), 8); }
    void u64(uint64_t v) { raw(v, 8); }
    void str(const std::string& s) {
        if (s.size() > kMaxString) throw ProtocolError("string field of " + std::to_string(s.size()) + " bytes is too long");
        u32(static_cast<uint32_t>(s.size()));
        out += s;
    }
    void ints(const std::vector<int32_t>& v) {
        u32(static_cast<uint32_t>(v.size()));
        for (int32_t x : v) i32(x);
    }
    std::string out;

private:
    void raw(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    }
};

class Reader {
public:
    Reader(const std::string& body, const char* message) : body_(body), message_(message) {}
    uint8_t u8(const char* field) { return static_cast<uint8_t>(raw(field, 1)); }
    uint16_t u16(const char* field) { return static_cast<uint16_t>(raw(field, 2)); }
    uint32_t u32(const char* field) { return static_cast<uint32_t>(raw(field, 4)); }
    int32_t i32(const char* field) { return static_cast<int32_t>(static_cast<uint32_t>(raw(field, 4))); }
    int64_t i64(const char* field) { return static_cast<int64_t>(raw(field, 8)); }
    uint64_t u64(const char* field) { return raw(field, 8); }
    std::string str(const char* field) {
        uint32_t n = u32(field);
        if (n > kMaxString) fail(field, "string length " + std::to_string(n) + " exceeds " + std::to_string(kMaxString));
        need(field, n);
        std::string s = body_.substr(pos_, n);
        pos_ += n;
        return s;
    }
    std::vector<int32_t> ints(const char* field) {
        uint32_t n = count(field, 4);
        std::vector<int32_t> v(n);
        for (auto& x : v) x = i32(field);
        return v;
    }
    // A list count, refused when even the smallest items could not fit in the bytes left.
    uint32_t count(const char* field, size_t min_item_size) {
        uint32_t n = u32(field);
        if (static_cast<uint64_t>(n) * min_item_size > body_.size() - pos_) {
            fail(field, "count " + std::to_string(n) + " does not fit in the " + std::to_string(body_.size() - pos_) +
                            " bytes left");
        }
        return n;
    }
    uint8_t enum_u8(const char* field, uint8_t max) {
        uint8_t v = u8(field);
        if (v > max) fail(field, "value " + std::to_string(v) + " out of range 0.." + std::to_string(max));
        return v;
    }
    void finish() {
        if (pos_ != body_.size()) fail("end", std::to_string(body_.size() - pos_) + " unexpected trailing bytes");
    }
    [[noreturn]] void fail(const char* field, const std::string& why) {
        throw ProtocolError(std::string(message_) + "." + field + ": " + why);
    }

private:
    void need(const char* field, size_t n) {
        if (body_.size() - pos_ < n) {
            fail(field, "needs " + std::to_string(n) + " bytes, " + std::to_string(body_.size() - pos_) + " left");
        }
    }
    uint64_t raw(const char* field, int n) {
        need(field, n);
        uint64_t v = 0;
        for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(body_[pos_ + i])) << (8 * i);
        pos_ += n;
        return v;
    }
    const std::string& body_;
    const char* message_;
    size_t pos_ = 0;
};

void write_bool(Writer& w, bool b) { w.u8(b ? 1 : 0); }
bool read_bool(Reader& r, const char* field) { return r.enum_u8(field, 1) != 0; }

ActionKind read_kind(Reader& r) {
    uint16_t v = r.u16("kind");
    if (v < 1 || v > kMaxActionKind) r.fail("kind", "unknown action kind " + std::to_string(v));
    return static_cast<ActionKind>(v);
}

// Empty when `text` is at most `limit` bytes of printable ASCII, otherwise what is wrong with it.
std::string check_printable(const std::string& text, size_t limit) {
    if (text.size() > limit) return std::to_string(text.size()) + " bytes exceed the limit of " + std::to_string(limit);
    for (size_t i = 0; i < text.size(); ++i) {
        auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c > 0x7E) return "byte " + std::to_string(c) + " at offset " + std::to_string(i) + " is not printable ASCII";
    }
    return "";
}

}  // namespace

std::string check_error_code(const std::string& code) { return check_printable(code, kMaxErrorCode); }

const char* action_name(ActionKind kind) {
    switch (kind) {
        case ActionKind::Stop: return "stop";
        case ActionKind::Clean: return "clean";
        case ActionKind::Repair: return "repair";
        case ActionKind::Rollback: return "rollback";
        case ActionKind::RebuildGroup: return "rebuild_group";
        case ActionKind::SaveCkpt: return "save_ckpt";
        case ActionKind::Rename: return "rename";
        case ActionKind::Exit: return "exit";
        case ActionKind::Normal: return "normal";
        case ActionKind::Pause: return "pause";
        case ActionKind::Continue: return "continue";
        case ActionKind::Prelock: return "prelock";
    }
    return "unknown";
}

const char* section_name(Section s) {
    switch (s) {
        case Section::Step: return "step";
        case Section::Save: return "save";
        case Section::Eval: return "eval";
        case Section::Startup: return "startup";
        default: return "none";
    }
}

std::optional<Section> parse_section(const std::string& name) {
    for (uint8_t k = 0; k <= kMaxSection; ++k) {
        if (name == section_name(static_cast<Section>(k))) return static_cast<Section>(k);
    }
    return std::nullopt;
}

const char* strategy_name(Strategy s) {
    switch (s) {
        case Strategy::None: return "none";
        case Strategy::Retry: return "retry";
        case Strategy::Recover: return "recover";
        case Strategy::Dump: return "dump";
        case Strategy::Exit: return "exit";
    }
    return "unknown";
}

std::string encode(const RegisterMsg& m) {
    Writer w;
    w.i32(m.rank);
    w.i32(m.world_size);
    w.u32(m.heartbeat_ms);
    w.str(m.token);
    write_bool(w, m.restarted);
    w.i32(m.pid);
    write_bool(w, m.may_replace);
    return w.out;
}

void decode(const std::string& body, RegisterMsg& m) {
    Reader r(body, "Register");
    m.rank = r.i32("rank");
    m.world_size = r.i32("world_size");
    m.heartbeat_ms = r.u32("heartbeat_ms");
    m.token = r.str("token");
    m.restarted = read_bool(r, "restarted");
    m.pid = r.i32("pid");
    m.may_replace = read_bool(r, "may_replace");
    r.finish();
}

std::string encode(const RegisterAckMsg& m) {
    Writer w;
    w.i32(m.result);
    w.str(m.message);
    write_bool(w, m.replacement);
    return w.out;
}

void decode(const std::string& body, RegisterAckMsg& m) {
    Reader r(body, "RegisterAck");
    m.result = r.i32("result");
    m.message = r.str("message");
    m.replacement = read_bool(r, "replacement");
    r.finish();
}

std::string encode(const RankStatusMsg& m) {
    Writer w;
    w.i32(m.rank);
    w.i64(m.step);
    w.u8(static_cast<uint8_t>(m.run_status));
    w.u8(static_cast<uint8_t>(m.data_status));
    w.i64(m.ckpt_step);
    w.u8(static_cast<uint8_t>(m.section));
    w.i64(m.section_ms);
    w.i64(m.limit_ms);
    w.u64(m.progress);
    return w.out;
}

void decode(const std::string& body, RankStatusMsg& m) {
    Reader r(body, "RankStatus");
    m.rank = r.i32("rank");
    m.step = r.i64("step");
    m.run_status = static_cast<RunStatus>(r.enum_u8("run_status", 4));
    m.data_status = static_cast<DataStatus>(r.enum_u8("data_status", 2));
    m.ckpt_step = r.i64("ckpt_step");
    m.section = static_cast<Section>(r.enum_u8("section", kMaxSection));
    m.section_ms = r.i64("section_ms");
    m.limit_ms = r.i64("limit_ms");
    m.progress = r.u64("progress");
    if (m.section_ms < 0) r.fail("section_ms", "negative duration " + std::to_string(m.section_ms));
    if (m.limit_ms < 0) r.fail("limit_ms", "negative limit " + std::to_string(m.limit_ms));
    r.finish();
}

std::string encode(const ReplicaInfoMsg& m) {
    Writer w;
    w.i32(m.rank);
    w.u32(static_cast<uint32_t>(m.groups.size()));
    for (const auto& g : m.groups) {
        w.u8(g.optimizer_type);
        w.i32(g.replica_cnt);
        w.i32(g.replica_shift);
        w.ints(g.ranks);
    }
    return w.out;
}

void decode(const std::string& body, ReplicaInfoMsg& m) {
    Reader r(body, "ReplicaInfo");
    m.rank = r.i32("rank");
    m.groups.resize(r.count("groups", 13));
    for (auto& g : m.groups) {
        g.optimizer_type = r.enum_u8("optimizer_type", 1);
        g.replica_cnt = r.i32("replica_cnt");
        g.replica_shift = r.i32("replica_shift");
        g.ranks = r.ints("ranks");
    }
    r.finish();
}

std::string encode(const ErrorReportMsg& m) {
    Writer w;
    w.i32(m.rank);
    w.u8(m.state);
    std::string problem = check_error_code(m.error_code);
    if (!problem.empty()) throw ProtocolError("ErrorReport.error_code: " + problem);
    w.str(m.error_code);
    return w.out;
}

void decode(const std::string& body, ErrorReportMsg& m) {
    Reader r(body, "ErrorReport");
    m.rank = r.i32("rank");
    m.state = r.enum_u8("state", 8);
    m.error_code = r.str("error_code");
    std::string problem = check_error_code(m.error_code);
    if (!problem.empty()) r.fail("error_code", problem);
    r.finish();
}

std::string encode(const ActionMsg& m) {
    Writer w;
    w.u16(static_cast<uint16_t>(m.kind));
    w.u8(static_cast<uint8_t>(m.strategy));
    w.i64(m.step);
    write_bool(w, m.need_rebuild);
    write_bool(w, m.is_uce);
    w.ints(m.error_ranks);
    w.u32(static_cast<uint32_t>(m.repair.size()));
    for (const auto& info : m.repair) {
        w.u8(info.optimizer_type);
        w.u8(info.repair_type);
        w.ints(info.src);
        w.ints(info.dst);
        w.ints(info.rank_list);
    }
    w.u32(static_cast<uint32_t>(m.save.size()));
    for (const auto& info : m.save) {
        w.u8(info.optimizer_type);
        w.ints(info.ranks);
    }
    return w.out;
}

void decode(const std::string& body, ActionMsg& m) {
    Reader r(body, "Action");
    m.kind = read_kind(r);
    m.strategy = static_cast<Strategy>(r.enum_u8("strategy", 4));
    m.step = r.i64("step");
    m.need_rebuild = read_bool(r, "need_rebuild");
    m.is_uce = read_bool(r, "is_uce");
    m.error_ranks = r.ints("error_ranks");
    m.repair.resize(r.count("repair", 14));
    for (auto& info : m.repair) {
        info.optimizer_type = r.enum_u8("repair.optimizer_type", 1);
        info.repair_type = r.enum_u8("repair.repair_type", kMaxRepairType);
        info.src = r.ints("repair.src");
        info.dst = r.ints("repair.dst");
        info.rank_list = r.ints("repair.rank_list");
        if (info.src.size() != info.dst.size()) r.fail("repair", "src and dst lists differ in length");
    }
    m.save.resize(r.count("save", 5));
    for (auto& info : m.save) {
        info.optimizer_type = r.enum_u8("save.optimizer_type", 1);
        info.ranks = r.ints("save.ranks");
    }
    r.finish();
}

std::string encode(const ActionReplyMsg& m) {
    Writer w;
    w.i32(m.rank);
    w.u16(static_cast<uint16_t>(m.kind));
    w.i32(m.result);
    w.str(m.message);
    return w.out;
}

void decode(const std::string& body, ActionReplyMsg& m) {
    Reader r(body, "ActionReply");
    m.rank = r.i32("rank");
    m.kind = read_kind(r);
    m.result = r.i32("result");
    m.message = r.str("message");
    r.finish();
}

std::string encode(const GoodbyeMsg& m) {
    std::string problem = check_printable(m.reason, kMaxGoodbyeReason);
    if (!problem.empty()) throw ProtocolError("Goodbye.reason: " + problem);
    Writer w;
    w.i32(m.rank);
    w.str(m.reason);
    return w.out;
}

void decode(const std::string& body, GoodbyeMsg& m) {
    Reader r(body, "Goodbye");
    m.rank = r.i32("rank");
    m.reason = r.str("reason");
    std::string problem = check_printable(m.reason, kMaxGoodbyeReason);
    if (!problem.empty()) r.fail("reason", problem);
    r.finish();
}

std::string encode(const ProcessEndedMsg& m) {
    std::string problem = check_printable(m.how, kMaxGoodbyeReason);
    if (!problem.empty()) throw ProtocolError("ProcessEnded.how: " + problem);
    Writer w;
    w.str(m.token);
    w.i32(m.rank);
    w.i32(m.pid);
    w.str(m.how);
    return w.out;
}

void decode(const std::string& body, ProcessEndedMsg& m) {
    Reader r(body, "ProcessEnded");
    m.token = r.str("token");
    m.rank = r.i32("rank");
    m.pid = r.i32("pid");
    m.how = r.str("how");
    std::string problem = check_printable(m.how, kMaxGoodbyeReason);
    if (!problem.empty()) r.fail("how", problem);
    r.finish();
}

}  // namespace mindio
