// One generic codec driven by a field table per message (Schema<Msg>::fields, below): adding a field
// to a message is one line in its table, read and written in the same order by construction.
#include "protocol/messages.h"

#include <type_traits>

namespace mindio {
namespace {

constexpr uint32_t kMaxString = 64 * 1024;

// Empty when `text` is at most `limit` bytes of printable ASCII, otherwise what is wrong with it.
std::string check_printable(const std::string& text, size_t limit) {
    if (text.size() > limit) return std::to_string(text.size()) + " bytes exceed the limit of " + std::to_string(limit);
    for (size_t i = 0; i < text.size(); ++i) {
        auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c > 0x7E) return "byte " + std::to_string(c) + " at offset " + std::to_string(i) + " is not printable ASCII";
    }
    return "";
}

// What a table entry may add to its field's type. Plain: the type says it all.
struct Plain {};
// The values a decoded integer may take. `unknown` words the refusal ("unknown action kind 0");
// without it the refusal states the range.
struct Values {
    uint64_t lo, hi;
    const char* unknown = nullptr;
};
constexpr Values upto(uint64_t hi) { return {0, hi}; }
// Logged text: at most `limit` bytes of printable ASCII. The sender refuses it too, so a bad text
// fails where it was made instead of closing the connection.
struct Printable {
    size_t limit;
};

// The values of each enum (and bool) on the wire.
template <typename E> constexpr Values values_of();
template <> constexpr Values values_of<bool>() { return upto(1); }
template <> constexpr Values values_of<RunStatus>() { return upto(kMaxRunStatus); }
template <> constexpr Values values_of<DataStatus>() { return upto(kMaxDataStatus); }
template <> constexpr Values values_of<Section>() { return upto(kMaxSection); }
template <> constexpr Values values_of<Strategy>() { return upto(kMaxStrategy); }
template <> constexpr Values values_of<ActionKind>() { return {1, kMaxActionKind, "unknown action kind"}; }

template <typename T> struct IsVector : std::false_type {};
template <typename T> struct IsVector<std::vector<T>> : std::true_type {};
// A field that is itself a message with a table (a list item such as RepairInfoMsg).
template <typename T>
constexpr bool kNested = std::is_class_v<T> && !std::is_same_v<T, std::string> && !IsVector<T>::value;

// Schema<Msg>: `name`, for errors, and `fields(m, visit)`, which calls visit(field name, member[, spec])
// for each field in wire order; `m` is const when encoding. `check` runs after a decoded message's
// fields, for rules across fields.
template <typename Msg> struct Schema;
class Decoder;
struct NoCheck {
    template <typename Msg> static void check(const Msg&, Decoder&) {}
};

class Encoder {
public:
    template <typename T, typename Spec = Plain>
    void operator()(const char*, const T& value, Spec = {}) { put(value); }
    std::string out;

private:
    template <typename T> void put(const T& v) {
        if constexpr (std::is_same_v<T, bool>) {
            put(static_cast<uint8_t>(v ? 1 : 0));
        } else if constexpr (std::is_enum_v<T>) {
            put(static_cast<std::underlying_type_t<T>>(v));
        } else if constexpr (std::is_integral_v<T>) {
            uint64_t bits = static_cast<std::make_unsigned_t<T>>(v);  // little-endian, two's complement
            for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
        } else if constexpr (std::is_same_v<T, std::string>) {
            if (v.size() > kMaxString) {
                throw ProtocolError("string field of " + std::to_string(v.size()) + " bytes is too long");
            }
            put(static_cast<uint32_t>(v.size()));
            out += v;
        } else if constexpr (IsVector<T>::value) {
            put(static_cast<uint32_t>(v.size()));
            for (const auto& item : v) put(item);
        } else {
            Schema<T>::fields(v, *this);
        }
    }
};

// Runs before the Encoder: a refused message writes nothing.
class SendCheck {
public:
    explicit SendCheck(std::string where) : where_(std::move(where)) {}
    template <typename T, typename Spec = Plain>
    void operator()(const char* field, const T& value, Spec spec = {}) {
        if constexpr (std::is_same_v<Spec, Printable>) {
            std::string problem = check_printable(value, spec.limit);
            if (!problem.empty()) throw ProtocolError(where_ + "." + field + ": " + problem);
        } else if constexpr (IsVector<T>::value) {
            if constexpr (kNested<typename T::value_type>) {
                for (const auto& item : value) nested(field, item);
            }
        } else if constexpr (kNested<T>) {
            nested(field, value);
        }
    }

private:
    template <typename T> void nested(const char* field, const T& item) {
        SendCheck inner(where_ + "." + field);
        Schema<T>::fields(item, inner);
    }
    std::string where_;
};

// Bytes a value takes at the least (an empty string or list is its count), so that a list count
// that cannot fit in the body is refused before anything is allocated for it.
template <typename T> size_t min_wire_size();
struct SizeCount {
    size_t total = 0;
    template <typename T, typename Spec = Plain>
    void operator()(const char*, const T&, Spec = {}) { total += min_wire_size<T>(); }
};
template <typename T> size_t min_wire_size() {
    if constexpr (std::is_same_v<T, std::string> || IsVector<T>::value) {
        return 4;
    } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
        return sizeof(T);
    } else {
        static const size_t size = [] {
            T probe{};
            SizeCount count;
            Schema<T>::fields(probe, count);
            return count.total;
        }();
        return size;
    }
}

// Every read is checked against the bytes left; a refusal is a ProtocolError naming the field as
// Message.field, or Message.list.field inside a list's item.
class Decoder {
public:
    Decoder(const std::string& body, const char* message) : body_(body), where_(message) {}

    template <typename T, typename Spec = Plain>
    void operator()(const char* field, T& value, Spec spec = {}) {
        get(field, value);
        if constexpr (std::is_same_v<Spec, Values>) {
            in_range(field, value, spec);
        } else if constexpr (std::is_same_v<Spec, Printable>) {
            std::string problem = check_printable(value, spec.limit);
            if (!problem.empty()) fail(field, problem);
        }
    }
    void finish() {
        if (pos_ != body_.size()) fail("end", std::to_string(body_.size() - pos_) + " unexpected trailing bytes");
    }
    [[noreturn]] void fail(const char* field, const std::string& why) {
        throw ProtocolError(where_ + "." + field + ": " + why);
    }
    // Refuses the message (or list item) being decoded as a whole.
    [[noreturn]] void fail(const std::string& why) { throw ProtocolError(where_ + ": " + why); }

private:
    template <typename T> void get(const char* field, T& v) {
        if constexpr (std::is_same_v<T, bool>) {
            v = in_range(field, raw<uint8_t>(field), values_of<bool>()) != 0;
        } else if constexpr (std::is_enum_v<T>) {
            v = static_cast<T>(in_range(field, raw<std::underlying_type_t<T>>(field), values_of<T>()));
        } else if constexpr (std::is_integral_v<T>) {
            v = raw<T>(field);
        } else if constexpr (std::is_same_v<T, std::string>) {
            uint32_t n = raw<uint32_t>(field);
            if (n > kMaxString) {
                fail(field, "string length " + std::to_string(n) + " exceeds " + std::to_string(kMaxString));
            }
            need(field, n);
            v.assign(body_, pos_, n);
            pos_ += n;
        } else if constexpr (IsVector<T>::value) {
            v.resize(count(field, min_wire_size<typename T::value_type>()));
            for (auto& item : v) get(field, item);
        } else {
            std::string outer = where_;
            where_ += std::string(".") + field;
            Schema<T>::fields(v, *this);
            Schema<T>::check(v, *this);
            where_ = std::move(outer);
        }
    }
    template <typename T> T in_range(const char* field, T v, Values values) {
        auto n = static_cast<uint64_t>(v);
        if (n < values.lo || n > values.hi) {
            fail(field, values.unknown ? std::string(values.unknown) + " " + std::to_string(n)
                                       : "value " + std::to_string(n) + " out of range " + std::to_string(values.lo) +
                                             ".." + std::to_string(values.hi));
        }
        return v;
    }
    // A list count, refused when even the smallest items could not fit in the bytes left.
    uint32_t count(const char* field, size_t min_item_size) {
        uint32_t n = raw<uint32_t>(field);
        if (static_cast<uint64_t>(n) * min_item_size > body_.size() - pos_) {
            fail(field, "count " + std::to_string(n) + " does not fit in the " + std::to_string(body_.size() - pos_) +
                            " bytes left");
        }
        return n;
    }
    void need(const char* field, size_t n) {
        if (body_.size() - pos_ < n) {
            fail(field, "needs " + std::to_string(n) + " bytes, " + std::to_string(body_.size() - pos_) + " left");
        }
    }
    template <typename T> T raw(const char* field) {
        need(field, sizeof(T));
        uint64_t bits = 0;
        for (size_t i = 0; i < sizeof(T); ++i) {
            bits |= static_cast<uint64_t>(static_cast<uint8_t>(body_[pos_ + i])) << (8 * i);
        }
        pos_ += sizeof(T);
        return static_cast<T>(static_cast<std::make_unsigned_t<T>>(bits));
    }

    const std::string& body_;
    std::string where_;
    size_t pos_ = 0;
};

// The field tables, in wire order.

template <> struct Schema<RegisterMsg> : NoCheck {
    static constexpr const char* name = "Register";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("rank", m.rank);
        v("world_size", m.world_size);
        v("heartbeat_ms", m.heartbeat_ms);
        v("token", m.token);
        v("restarted", m.restarted);
        v("pid", m.pid);
        v("may_replace", m.may_replace);
        v("term", m.term);
        v("recovery_action", m.recovery_action, upto(kMaxActionKind));
        v("leader_gone", m.leader_gone);
        v("controllers", m.controllers);
    }
};

template <> struct Schema<RegisterAckMsg> : NoCheck {
    static constexpr const char* name = "RegisterAck";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("result", m.result);
        v("message", m.message);
        v("replacement", m.replacement);
        v("term", m.term);
    }
};

template <> struct Schema<RankStatusMsg> {
    static constexpr const char* name = "RankStatus";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("rank", m.rank);
        v("step", m.step);
        v("run_status", m.run_status);
        v("data_status", m.data_status);
        v("ckpt_step", m.ckpt_step);
        v("section", m.section);
        v("section_ms", m.section_ms);
        v("limit_ms", m.limit_ms);
        v("progress", m.progress);
        v("compute_ms", m.compute_ms);
    }
    static void check(const RankStatusMsg& m, Decoder& d) {
        if (m.section_ms < 0) d.fail("section_ms", "negative duration " + std::to_string(m.section_ms));
        if (m.compute_ms < -1) d.fail("compute_ms", "negative duration " + std::to_string(m.compute_ms));
        if (m.limit_ms < 0) d.fail("limit_ms", "negative limit " + std::to_string(m.limit_ms));
    }
};

template <> struct Schema<ReplicaGroupMsg> : NoCheck {
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("optimizer_type", m.optimizer_type, upto(1));
        v("replica_cnt", m.replica_cnt);
        v("replica_shift", m.replica_shift);
        v("ranks", m.ranks);
    }
};

template <> struct Schema<ReplicaInfoMsg> : NoCheck {
    static constexpr const char* name = "ReplicaInfo";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("rank", m.rank);
        v("groups", m.groups);
        v("domain", m.domain, Printable{kMaxDomain});
    }
};

template <> struct Schema<ErrorReportMsg> : NoCheck {
    static constexpr const char* name = "ErrorReport";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("rank", m.rank);
        v("state", m.state, upto(kMaxReportState));
        v("error_code", m.error_code, Printable{kMaxErrorCode});
    }
};

template <> struct Schema<RepairInfoMsg> {
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("optimizer_type", m.optimizer_type, upto(1));
        v("repair_type", m.repair_type, upto(kMaxRepairType));
        v("src", m.src);
        v("dst", m.dst);
        v("rank_list", m.rank_list);
    }
    static void check(const RepairInfoMsg& m, Decoder& d) {
        if (m.src.size() != m.dst.size()) d.fail("src and dst lists differ in length");
    }
};

template <> struct Schema<SaveInfoMsg> : NoCheck {
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("optimizer_type", m.optimizer_type, upto(1));
        v("ranks", m.ranks);
    }
};

template <> struct Schema<ActionMsg> : NoCheck {
    static constexpr const char* name = "Action";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("kind", m.kind);
        v("strategy", m.strategy);
        v("step", m.step);
        v("need_rebuild", m.need_rebuild);
        v("is_uce", m.is_uce);
        v("error_ranks", m.error_ranks);
        v("repair", m.repair);
        v("save", m.save);
        v("absent_ranks", m.absent_ranks);
    }
};

template <> struct Schema<ActionReplyMsg> : NoCheck {
    static constexpr const char* name = "ActionReply";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("rank", m.rank);
        v("kind", m.kind);
        v("result", m.result);
        v("message", m.message);
    }
};

template <> struct Schema<GoodbyeMsg> : NoCheck {
    static constexpr const char* name = "Goodbye";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("rank", m.rank);
        v("reason", m.reason, Printable{kMaxGoodbyeReason});
    }
};

template <> struct Schema<ProcessEndedMsg> : NoCheck {
    static constexpr const char* name = "ProcessEnded";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("token", m.token);
        v("rank", m.rank);
        v("pid", m.pid);
        v("how", m.how, Printable{kMaxGoodbyeReason});
    }
};

template <> struct Schema<NoReplacementMsg> : NoCheck {
    static constexpr const char* name = "NoReplacement";
    template <typename Self, typename Visit> static void fields(Self& m, Visit& v) {
        v("token", m.token);
        v("ranks", m.ranks);
        v("why", m.why, Printable{kMaxGoodbyeReason});
    }
};

template <typename Msg> std::string encode_message(const Msg& m) {
    SendCheck check(Schema<Msg>::name);
    Schema<Msg>::fields(m, check);
    Encoder encoder;
    Schema<Msg>::fields(m, encoder);
    return std::move(encoder.out);
}

template <typename Msg> void decode_message(const std::string& body, Msg& m) {
    Decoder decoder(body, Schema<Msg>::name);
    Schema<Msg>::fields(m, decoder);
    Schema<Msg>::check(m, decoder);
    decoder.finish();
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
        case Strategy::ScaleIn: return "scale_in";
        case Strategy::ScaleOut: return "scale_out";
        case Strategy::HotSwitch: return "hot_switch";
    }
    return "unknown";
}

#define MINDIO_MESSAGE_CODEC(Msg)                                        \
    std::string encode(const Msg& m) { return encode_message(m); }       \
    void decode(const std::string& body, Msg& m) { decode_message(body, m); }
MINDIO_MESSAGE_CODEC(RegisterMsg)
MINDIO_MESSAGE_CODEC(RegisterAckMsg)
MINDIO_MESSAGE_CODEC(RankStatusMsg)
MINDIO_MESSAGE_CODEC(ReplicaInfoMsg)
MINDIO_MESSAGE_CODEC(ErrorReportMsg)
MINDIO_MESSAGE_CODEC(ActionMsg)
MINDIO_MESSAGE_CODEC(ActionReplyMsg)
MINDIO_MESSAGE_CODEC(GoodbyeMsg)
MINDIO_MESSAGE_CODEC(ProcessEndedMsg)
MINDIO_MESSAGE_CODEC(NoReplacementMsg)
#undef MINDIO_MESSAGE_CODEC

}  // namespace mindio
