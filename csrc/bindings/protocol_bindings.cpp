// Frame and message codecs exposed to Python, for tests and for tools that speak the protocol.
// Messages cross as dicts whose keys are the C++ field names; enum fields are plain ints.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "protocol/frame.h"
#include "protocol/messages.h"

namespace py = pybind11;
using namespace mindio;

namespace {

template <typename T>
T get(const py::dict& d, const char* key, T fallback) {
    return d.contains(key) ? d[key].cast<T>() : fallback;
}

std::vector<int32_t> ints(const py::dict& d, const char* key) { return get<std::vector<int32_t>>(d, key, {}); }

std::string encode_dict(MsgType type, const py::dict& d) {
    switch (type) {
        case MsgType::Register:
            return encode(RegisterMsg{get<int32_t>(d, "rank", 0), get<int32_t>(d, "world_size", 0),
                                      get<uint32_t>(d, "heartbeat_ms", 0), get<std::string>(d, "token", ""),
                                      get<bool>(d, "restarted", false), get<int32_t>(d, "pid", 0),
                                      get<bool>(d, "may_replace", false), get<uint64_t>(d, "term", 0),
                                      get<uint16_t>(d, "recovery_action", 0), get<bool>(d, "leader_gone", false),
                                      get<uint16_t>(d, "controllers", 0)});
        case MsgType::RegisterAck:
        case MsgType::ProcessEndedAck:
            return encode(RegisterAckMsg{get<int32_t>(d, "result", 0), get<std::string>(d, "message", ""),
                                         get<bool>(d, "replacement", false), get<uint64_t>(d, "term", 1)});
        case MsgType::Heartbeat:
        case MsgType::Status:
            return encode(RankStatusMsg{get<int32_t>(d, "rank", 0), get<int64_t>(d, "step", -1),
                                        static_cast<RunStatus>(get<int>(d, "run_status", 0)),
                                        static_cast<DataStatus>(get<int>(d, "data_status", 0)),
                                        get<int64_t>(d, "ckpt_step", -1),
                                        static_cast<Section>(get<int>(d, "section", 0)),
                                        get<int64_t>(d, "section_ms", 0), get<int64_t>(d, "limit_ms", 0),
                                        get<uint64_t>(d, "progress", 0), get<int64_t>(d, "compute_ms", -1)});
        case MsgType::ReplicaInfo: {
            ReplicaInfoMsg m{get<int32_t>(d, "rank", 0), {}, get<std::string>(d, "domain", "")};
            for (auto item : get<py::list>(d, "groups", py::list())) {
                auto g = item.cast<py::dict>();
                m.groups.push_back({get<uint8_t>(g, "optimizer_type", 0), get<int32_t>(g, "replica_cnt", 1),
                                    get<int32_t>(g, "replica_shift", 0), ints(g, "ranks")});
            }
            return encode(m);
        }
        case MsgType::ErrorReport:
            return encode(ErrorReportMsg{get<int32_t>(d, "rank", 0), get<uint8_t>(d, "state", 0),
                                         get<std::string>(d, "error_code", "")});
        case MsgType::Action: {
            ActionMsg m;
            m.kind = static_cast<ActionKind>(get<int>(d, "kind", 1));
            m.strategy = static_cast<Strategy>(get<int>(d, "strategy", 0));
            m.step = get<int64_t>(d, "step", -1);
            m.need_rebuild = get<bool>(d, "need_rebuild", false);
            m.is_uce = get<bool>(d, "is_uce", false);
            m.error_ranks = ints(d, "error_ranks");
            m.absent_ranks = ints(d, "absent_ranks");
            for (auto item : get<py::list>(d, "repair", py::list())) {
                auto r = item.cast<py::dict>();
                m.repair.push_back({get<uint8_t>(r, "optimizer_type", 0), get<uint8_t>(r, "repair_type", 0),
                                    ints(r, "src"), ints(r, "dst"), ints(r, "rank_list")});
            }
            for (auto item : get<py::list>(d, "save", py::list())) {
                auto s = item.cast<py::dict>();
                m.save.push_back({get<uint8_t>(s, "optimizer_type", 0), ints(s, "ranks")});
            }
            return encode(m);
        }
        case MsgType::Goodbye:
            return encode(GoodbyeMsg{get<int32_t>(d, "rank", 0), get<std::string>(d, "reason", "")});
        case MsgType::ProcessEnded:
            return encode(ProcessEndedMsg{get<std::string>(d, "token", ""), get<int32_t>(d, "rank", 0),
                                          get<int32_t>(d, "pid", 0), get<std::string>(d, "how", "")});
        case MsgType::NoReplacement:
            return encode(NoReplacementMsg{get<std::string>(d, "token", ""), ints(d, "ranks"),
                                           get<std::string>(d, "why", "")});
        case MsgType::ActionReply:
            return encode(ActionReplyMsg{get<int32_t>(d, "rank", 0), static_cast<ActionKind>(get<int>(d, "kind", 1)),
                                         get<int32_t>(d, "result", 0), get<std::string>(d, "message", "")});
    }
    throw ProtocolError("unknown message type " + std::to_string(static_cast<int>(type)));
}

py::dict repair_dict(const RepairInfoMsg& r) {
    py::dict d;
    d["optimizer_type"] = r.optimizer_type;
    d["repair_type"] = r.repair_type;
    d["src"] = r.src;
    d["dst"] = r.dst;
    d["rank_list"] = r.rank_list;
    return d;
}

}  // namespace

py::dict action_to_dict(const ActionMsg& m) {
    py::dict d;
    d["kind"] = static_cast<int>(m.kind);
    d["strategy"] = static_cast<int>(m.strategy);
    d["step"] = m.step;
    d["need_rebuild"] = m.need_rebuild;
    d["is_uce"] = m.is_uce;
    d["error_ranks"] = m.error_ranks;
    d["absent_ranks"] = m.absent_ranks;
    py::list repair, save;
    for (const auto& r : m.repair) repair.append(repair_dict(r));
    for (const auto& s : m.save) {
        py::dict sd;
        sd["optimizer_type"] = s.optimizer_type;
        sd["ranks"] = s.ranks;
        save.append(sd);
    }
    d["repair"] = repair;
    d["save"] = save;
    return d;
}

namespace {

py::dict decode_dict(MsgType type, const std::string& body) {
    py::dict d;
    switch (type) {
        case MsgType::Register: {
            auto m = decode_as<RegisterMsg>(body);
            d["rank"] = m.rank; d["world_size"] = m.world_size; d["heartbeat_ms"] = m.heartbeat_ms;
            d["token"] = m.token; d["restarted"] = m.restarted; d["pid"] = m.pid;
            d["may_replace"] = m.may_replace; d["term"] = m.term; d["recovery_action"] = m.recovery_action;
            d["leader_gone"] = m.leader_gone; d["controllers"] = m.controllers;
            break;
        }
        case MsgType::RegisterAck:
        case MsgType::ProcessEndedAck: {
            auto m = decode_as<RegisterAckMsg>(body);
            d["result"] = m.result; d["message"] = m.message; d["replacement"] = m.replacement; d["term"] = m.term;
            break;
        }
        case MsgType::Heartbeat:
        case MsgType::Status: {
            auto m = decode_as<RankStatusMsg>(body);
            d["rank"] = m.rank; d["step"] = m.step; d["run_status"] = static_cast<int>(m.run_status);
            d["data_status"] = static_cast<int>(m.data_status);
            d["ckpt_step"] = m.ckpt_step;
            d["section"] = static_cast<int>(m.section); d["section_ms"] = m.section_ms;
            d["limit_ms"] = m.limit_ms; d["progress"] = m.progress; d["compute_ms"] = m.compute_ms;
            break;
        }
        case MsgType::ReplicaInfo: {
            auto m = decode_as<ReplicaInfoMsg>(body);
            py::list groups;
            for (const auto& g : m.groups) {
                py::dict gd;
                gd["optimizer_type"] = g.optimizer_type; gd["replica_cnt"] = g.replica_cnt;
                gd["replica_shift"] = g.replica_shift; gd["ranks"] = g.ranks;
                groups.append(gd);
            }
            d["rank"] = m.rank; d["groups"] = groups; d["domain"] = m.domain;
            break;
        }
        case MsgType::ErrorReport: {
            auto m = decode_as<ErrorReportMsg>(body);
            d["rank"] = m.rank; d["state"] = m.state; d["error_code"] = m.error_code;
            break;
        }
        case MsgType::Action:
            return action_to_dict(decode_as<ActionMsg>(body));
        case MsgType::Goodbye: {
            auto m = decode_as<GoodbyeMsg>(body);
            d["rank"] = m.rank; d["reason"] = m.reason;
            break;
        }
        case MsgType::ProcessEnded: {
            auto m = decode_as<ProcessEndedMsg>(body);
            d["token"] = m.token; d["rank"] = m.rank; d["pid"] = m.pid; d["how"] = m.how;
            break;
        }
        case MsgType::NoReplacement: {
            auto m = decode_as<NoReplacementMsg>(body);
            d["token"] = m.token; d["ranks"] = m.ranks; d["why"] = m.why;
            break;
        }
        case MsgType::ActionReply: {
            auto m = decode_as<ActionReplyMsg>(body);
            d["rank"] = m.rank; d["kind"] = static_cast<int>(m.kind); d["result"] = m.result;
            d["message"] = m.message;
            break;
        }
    }
    return d;
}

MsgType checked_type(int type) {
    if (type < kMinMsgType || type > kMaxMsgType) throw ProtocolError("unknown message type " + std::to_string(type));
    return static_cast<MsgType>(type);
}

}  // namespace

void bind_protocol(py::module_& m) {
    py::register_exception<ProtocolError>(m, "ProtocolError", PyExc_ValueError);
    m.attr("FRAME_MAGIC") = kMagic;
    m.attr("FRAME_VERSION") = kVersion;
    m.attr("FRAME_HEADER_SIZE") = kHeaderSize;
    m.attr("FRAME_MAX_BODY") = kMaxBody;
    m.attr("PROCESS_ENDED_AFTER_LEAVING") = kProcessEndedAfterLeaving;
    m.attr("LEAVES_THE_JOB") = kLeavesTheJob;
    m.attr("NOT_THE_LEADER") = kNotTheLeader;
    m.attr("AWAITING_MAJORITY") = kAwaitingMajority;
    m.attr("NO_MAJORITY") = kNoMajority;
    py::dict types;
    types["REGISTER"] = 1; types["REGISTER_ACK"] = 2; types["HEARTBEAT"] = 3; types["STATUS"] = 4;
    types["REPLICA_INFO"] = 5; types["ERROR_REPORT"] = 6; types["ACTION"] = 7; types["ACTION_REPLY"] = 8;
    types["GOODBYE"] = 9; types["PROCESS_ENDED"] = 10; types["PROCESS_ENDED_ACK"] = 11;
    types["NO_REPLACEMENT"] = 12;
    m.attr("MSG_TYPES") = types;
    py::dict actions;
    for (uint16_t k = 1; k <= kMaxActionKind; ++k) actions[action_name(static_cast<ActionKind>(k))] = k;
    m.attr("ACTION_KINDS") = actions;
    py::dict sections;
    for (uint8_t k = 0; k <= kMaxSection; ++k) sections[section_name(static_cast<Section>(k))] = k;
    m.attr("SECTIONS") = sections;

    m.def("crc32", [](py::bytes data) {
        std::string s = data;
        return crc32(s.data(), s.size());
    });
    m.def("encode_frame", [](int type, uint64_t seq, py::bytes body) {
        return py::bytes(encode_frame(checked_type(type), seq, std::string(body)));
    }, py::arg("type"), py::arg("seq"), py::arg("body"));
    m.def("decode_frame", [](py::bytes data) {
        Frame f = decode_frame(std::string(data));
        return py::make_tuple(static_cast<int>(f.type), f.seq, py::bytes(f.body));
    }, "Decode exactly one frame -> (type, seq, body); raises ProtocolError naming what is wrong.");
    m.def("encode_message", [](int type, const py::dict& d) {
        return py::bytes(encode_dict(checked_type(type), d));
    }, py::arg("type"), py::arg("message"));
    m.def("decode_message", [](int type, py::bytes body) {
        return decode_dict(checked_type(type), std::string(body));
    }, py::arg("type"), py::arg("body"));
}
