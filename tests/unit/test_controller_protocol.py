"""Wire protocol: frame and message round trips, and every malformed input refused with a reason."""
import random
import struct

import pytest

from mindio_adaptor import _native as nat

T = nat.MSG_TYPES


def header(type_=T["HEARTBEAT"], seq=0, body=b"", magic=nat.FRAME_MAGIC, version=nat.FRAME_VERSION,
           length=None, crc=None):
    return struct.pack("<IHHQII", magic, version, type_, seq, len(body) if length is None else length,
                       nat.crc32(body) if crc is None else crc)


SAMPLES = {
    "REGISTER": {"rank": 7, "world_size": 16, "heartbeat_ms": 2000, "token": "s3cret", "restarted": True,
                 "pid": 2 ** 31 - 1, "may_replace": True, "term": 3, "recovery_action": 3, "leader_gone": True,
                 "controllers": 3},
    "REGISTER_ACK": {"result": 1, "message": "bad token", "replacement": False, "term": 2},
    "HEARTBEAT": {"rank": 3, "step": 123456789012, "run_status": 2, "data_status": 1, "ckpt_step": 123456789000,
                  "section": nat.SECTIONS["save"], "section_ms": 61234, "limit_ms": 600000, "progress": 2 ** 40,
                  "compute_ms": 1234},
    "STATUS": {"rank": 0, "step": -1, "run_status": 0, "data_status": 0, "ckpt_step": -1, "section": 0,
               "section_ms": 0, "limit_ms": 0, "progress": 0, "compute_ms": -1},
    "REPLICA_INFO": {"rank": 5, "groups": [
        {"optimizer_type": 0, "replica_cnt": 2, "replica_shift": 0, "ranks": [1, 3, 5, 7]},
        {"optimizer_type": 1, "replica_cnt": 4, "replica_shift": 0, "ranks": list(range(8))}],
        "domain": "host-a/node1"},
    "ERROR_REPORT": {"rank": 2, "state": 2, "error_code": "UCE ERROR at 0xdead"},
    "ACTION": {"kind": nat.ACTION_KINDS["repair"], "strategy": 1, "step": 42, "need_rebuild": True,
               "is_uce": True, "error_ranks": [3, 5],
               "repair": [{"optimizer_type": 0, "repair_type": 1, "src": [7], "dst": [3],
                           "rank_list": [3, 7]}],
               "save": [{"optimizer_type": 1, "ranks": [0, 1, 2]}], "absent_ranks": [6, 7]},
    "ACTION_REPLY": {"rank": 4, "kind": nat.ACTION_KINDS["clean"], "result": 2, "message": "ok\u00e9"},
    "GOODBYE": {"rank": -1, "reason": "controller destroyed"},
    "PROCESS_ENDED": {"token": "s3cret", "rank": 12, "pid": 4242, "how": "signal SIGKILL"},
    "PROCESS_ENDED_ACK": {"result": 0, "message": "rank 12 declared dead", "replacement": False, "term": 1},
    "NO_REPLACEMENT": {"token": "s3cret", "ranks": [2, 3], "why": "node 1 lost"},
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_message_round_trip(name):
    body = nat.encode_message(T[name], SAMPLES[name])
    assert nat.decode_message(T[name], body) == SAMPLES[name]
    frame = nat.encode_frame(T[name], 99, body)
    assert len(frame) == nat.FRAME_HEADER_SIZE + len(body)
    assert nat.decode_frame(frame) == (T[name], 99, body)


def test_the_last_run_status_and_section_round_trip():
    status = {"rank": 1, "step": 8, "run_status": 4, "data_status": 0, "ckpt_step": 8,
              "section": nat.SECTIONS["startup"], "section_ms": 5, "limit_ms": 600000, "progress": 0,
              "compute_ms": 0}
    assert nat.SECTIONS["startup"] == 4  # finished (run status 4) and start-up are the highest values
    assert nat.decode_message(T["STATUS"], nat.encode_message(T["STATUS"], status)) == status


def test_header_layout_is_little_endian_with_crc_of_body():
    body = b"abc"
    frame = nat.encode_frame(T["ACTION"], 0x0102030405060708, body)
    assert frame[:24] == header(T["ACTION"], 0x0102030405060708, body)
    assert frame[:4] == b"MIOA"
    assert nat.crc32(b"123456789") == 0xCBF43926  # the standard CRC-32 check value


@pytest.mark.parametrize("frame,reason", [
    (header(magic=0x12345678), "bad magic"),
    (header(version=nat.FRAME_VERSION + 1), f"version {nat.FRAME_VERSION + 1}"),
    (header(type_=0), "unknown message type 0"),
    (header(type_=99), "unknown message type 99"),
    (header(length=nat.FRAME_MAX_BODY + 1), "exceeds the limit"),
    (header(body=b"xy", crc=1) + b"xy", "checksum mismatch"),
    (header(body=b"xyz")[:10], "truncated"),
    (header(body=b"xyz") + b"xy", "truncated"),
    (header() + b"!", "trailing"),
])
def test_malformed_frames_are_refused_with_reason(frame, reason):
    with pytest.raises(nat.ProtocolError, match=reason):
        nat.decode_frame(frame)


def test_protocol_error_is_a_value_error():
    assert issubclass(nat.ProtocolError, ValueError)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_truncated_body_is_refused(name):
    body = nat.encode_message(T[name], SAMPLES[name])
    for cut in range(len(body)):
        with pytest.raises(nat.ProtocolError):
            nat.decode_message(T[name], body[:cut])
    with pytest.raises(nat.ProtocolError, match="trailing"):
        nat.decode_message(T[name], body + b"\0")


@pytest.mark.parametrize("message,body,reason", [
    ("ACTION", struct.pack("<H", 0), "unknown action kind 0"),
    ("ACTION", struct.pack("<H", 77), "unknown action kind 77"),
    ("HEARTBEAT", struct.pack("<iqBBq", 1, 5, 9, 0, -1), "run_status"),
    ("STATUS", struct.pack("<iqBBq", 1, 5, 5, 0, -1), "run_status"),  # 4 (finished) is the last
    ("STATUS", struct.pack("<iqBBqB", 1, 5, 4, 0, -1, 5), "section"),  # 4 (startup) is the last
    ("ERROR_REPORT", struct.pack("<iB", 1, 200) + struct.pack("<I", 0), "state"),
    ("ERROR_REPORT", struct.pack("<iB", 1, 10) + struct.pack("<I", 0), r"state: value 10 out of range 0\.\.9"),
    ("REGISTER", struct.pack("<iiII", 0, 1, 0, 0xFFFFFFFF), "string length"),
    ("REPLICA_INFO", struct.pack("<iI", 0, 0x7FFFFFFF), "does not fit"),
])
def test_out_of_range_fields_are_refused(message, body, reason):
    with pytest.raises(nat.ProtocolError, match=reason):
        nat.decode_message(T[message], body)


ACTION_HEAD = struct.pack("<HBqBBI", nat.ACTION_KINDS["repair"], 0, 1, 0, 0, 0)  # up to an empty error_ranks


@pytest.mark.parametrize("message,body,reason", [
    ("REPLICA_INFO", struct.pack("<iIBiiI", 0, 1, 2, 1, 0, 0),
     r"ReplicaInfo\.groups\.optimizer_type: value 2 out of range 0\.\.1"),
    ("ACTION", ACTION_HEAD + struct.pack("<IBB", 1, 0, 7) + bytes(16),
     r"Action\.repair\.repair_type: value 7 out of range 0\.\.6"),
    ("ACTION", ACTION_HEAD + struct.pack("<IIB", 0, 1, 2) + bytes(4),
     r"Action\.save\.optimizer_type: value 2 out of range 0\.\.1"),
    ("STATUS", struct.pack("<iqBBqBqqQq", 1, 5, 0, 0, -1, 1, -1, 0, 0, -1),
     "RankStatus.section_ms: negative duration -1"),
    ("STATUS", struct.pack("<iqBBqBqqQq", 1, 5, 0, 0, -1, 1, 0, -5, 0, -1), "RankStatus.limit_ms: negative limit -5"),
    ("STATUS", struct.pack("<iqBBqBqqQq", 1, 5, 0, 0, -1, 1, 0, 0, 0, -2),
     "RankStatus.compute_ms: negative duration -2"),
    ("REGISTER", struct.pack("<iiII", 0, 1, 0, 0) + bytes([2]), r"Register\.restarted: value 2 out of range 0\.\.1"),
    ("REGISTER", struct.pack("<iiIIBiBQH", 0, 1, 0, 0, 0, 0, 0, 1, 13),
     r"Register\.recovery_action: value 13 out of range 0\.\.12"),
])
def test_a_refusal_names_the_message_and_field(message, body, reason):
    """A field inside a list's item is named Message.list.field."""
    with pytest.raises(nat.ProtocolError, match=reason):
        nat.decode_message(T[message], body)


def test_action_with_unequal_src_dst_is_refused():
    sample = dict(SAMPLES["ACTION"], repair=[{"optimizer_type": 0, "repair_type": 0, "src": [1, 2],
                                               "dst": [3], "rank_list": []}])
    with pytest.raises(nat.ProtocolError, match="Action.repair: src and dst lists differ in length"):
        nat.decode_message(T["ACTION"], nat.encode_message(T["ACTION"], sample))


def test_random_bytes_never_crash_the_decoders():
    rng = random.Random(1234)
    for _ in range(3000):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 64)))
        for type_ in T.values():
            try:
                nat.decode_message(type_, data)
            except nat.ProtocolError:
                pass
        with pytest.raises(nat.ProtocolError):
            nat.decode_frame(data)


@pytest.mark.parametrize("code", ["", "80E01801", "x" * 64, " !~"])
def test_error_code_round_trips_up_to_its_bound(code):
    sample = {"rank": 1, "state": 2, "error_code": code}
    body = nat.encode_message(T["ERROR_REPORT"], sample)
    assert nat.decode_message(T["ERROR_REPORT"], body) == sample


def test_a_sub_health_report_is_state_9_on_the_wire():
    sample = {"rank": 3, "state": 9, "error_code": "MINDIO-SDC"}  # ReportState.SUB_HEALTH (protocol 11)
    assert nat.decode_message(T["ERROR_REPORT"], nat.encode_message(T["ERROR_REPORT"], sample)) == sample


def error_report_body(code: bytes) -> bytes:
    return struct.pack("<iBI", 1, 2, len(code)) + code


@pytest.mark.parametrize("code,reason", [
    (b"x" * 65, "65 bytes exceed the limit of 64"),
    (b"80E0\n1801", "byte 10 at offset 4 is not printable ASCII"),
    (b"\xff", "byte 255 at offset 0 is not printable ASCII"),
    (b"\x00", "byte 0 at offset 0"),
])
def test_bad_error_code_is_refused_naming_the_field(code, reason):
    with pytest.raises(nat.ProtocolError, match=f"ErrorReport.error_code: {reason}"):
        nat.decode_message(T["ERROR_REPORT"], error_report_body(code))
    # Through Python the text is UTF-8 encoded, so a non-ASCII byte differs; the reason does not.
    with pytest.raises(nat.ProtocolError, match="exceed the limit|not printable ASCII"):
        nat.encode_message(T["ERROR_REPORT"], {"rank": 1, "state": 2, "error_code": code.decode("latin-1")})


@pytest.mark.parametrize("reason,problem", [("x" * 257, "257 bytes exceed the limit of 256"),
                                            ("bye\n", "byte 10 at offset 3 is not printable ASCII")])
def test_goodbye_reason_is_bounded_printable_text(reason, problem):
    with pytest.raises(nat.ProtocolError, match=problem):
        nat.encode_message(T["GOODBYE"], {"rank": 1, "reason": reason})
    body = struct.pack("<iI", 1, len(reason)) + reason.encode()
    with pytest.raises(nat.ProtocolError, match="Goodbye.reason: " + problem):
        nat.decode_message(T["GOODBYE"], body)
    assert nat.decode_message(T["GOODBYE"], struct.pack("<iI", 2, 3) + b"bye") == {"rank": 2, "reason": "bye"}


@pytest.mark.parametrize("how,problem", [("x" * 257, "257 bytes exceed the limit of 256"),
                                         ("killed\n", "byte 10 at offset 6 is not printable ASCII")])
def test_process_ended_how_is_bounded_printable_text(how, problem):
    with pytest.raises(nat.ProtocolError, match=f"ProcessEnded.how: {problem}"):
        nat.encode_message(T["PROCESS_ENDED"], {"token": "t", "rank": 1, "pid": 2, "how": how})
    body = struct.pack("<I", 1) + b"t" + struct.pack("<iiI", 1, 2, len(how)) + how.encode()
    with pytest.raises(nat.ProtocolError, match=f"ProcessEnded.how: {problem}"):
        nat.decode_message(T["PROCESS_ENDED"], body)


# Further fixed messages for the byte check: empty and two-item lists, and the extremes of each integer.
WIRE_SAMPLES = dict({name: (name, msg) for name, msg in SAMPLES.items()}, **{
    "ACTION_EMPTY": ("ACTION", {"kind": nat.ACTION_KINDS["prelock"], "strategy": 4, "step": -1,
                                "need_rebuild": False, "is_uce": False, "error_ranks": [], "repair": [], "save": [],
                                "absent_ranks": []}),
    "ACTION_TWO_REPAIRS": ("ACTION", {
        "kind": nat.ACTION_KINDS["repair"], "strategy": 2, "step": 2 ** 40 + 3, "need_rebuild": False,
        "is_uce": True, "error_ranks": [-1, 2 ** 31 - 1],
        "repair": [{"optimizer_type": 1, "repair_type": 6, "src": [1, 2], "dst": [3, 4], "rank_list": []},
                   {"optimizer_type": 0, "repair_type": 3, "src": [], "dst": [], "rank_list": [9]}],
        "save": [{"optimizer_type": 0, "ranks": []}, {"optimizer_type": 1, "ranks": [5]}], "absent_ranks": []}),
    "REPLICA_INFO_EMPTY": ("REPLICA_INFO", {"rank": -7, "groups": [
        {"optimizer_type": 1, "replica_cnt": -1, "replica_shift": 3, "ranks": []}], "domain": ""}),
    "HEARTBEAT_EXTREMES": ("HEARTBEAT", {"rank": -2 ** 31, "step": -2 ** 63, "run_status": 4, "data_status": 2,
                                         "ckpt_step": 2 ** 63 - 1, "section": 4, "section_ms": 2 ** 63 - 1,
                                         "limit_ms": 1, "progress": 2 ** 64 - 1,
                                         "compute_ms": 2 ** 63 - 1}),
})

# The bytes of WIRE_SAMPLES as the hand-written codec (before the table-driven one) wrote them, with
# what frame versions 5 to 10 added (the controller's term in Register and RegisterAck, ReplicaInfo's
# domain; Register's recovery_action; Register's leader_gone; Register's controllers; the NoReplacement
# message; RankStatus's compute_ms; version 13: Action's absent_ranks, the last field) written by hand: the wire
# format must not change unnoticed.
WIRE_BYTES = {
    "ACTION": ("0300012a000000000000000101020000000300000005000000010000000001010000000700000001"
               "00000003000000020000000300000007000000010000000103000000000000000100000002000000"
               "020000000600000007000000"),
    "ACTION_EMPTY": "0c0004ffffffffffffffff0000000000000000000000000000" "00000000",
    "ACTION_REPLY": "04000000020002000000040000006f6bc3a9",
    "ACTION_TWO_REPAIRS": ("0300020300000000010000000102000000ffffffffffffff7f020000000106020000000100000002"
                           "00000002000000030000000400000000000000000300000000000000000100000009000000020000"
                           "000000000000010100000005000000" "00000000"),
    "ERROR_REPORT": "020000000213000000554345204552524f5220617420307864656164",
    "GOODBYE": "ffffffff14000000636f6e74726f6c6c65722064657374726f796564",
    "HEARTBEAT": ("03000000141a99be1c0000000201081a99be1c0000000232ef000000000000c02709000000000000"
                  "00000000010000" "d204000000000000"),
    "HEARTBEAT_EXTREMES": ("0000008000000000000000800402ffffffffffffff7f04ffffffffffffff7f0100000000000000ff"
                           "ffffffffffffff" "ffffffffffffff7f"),
    "PROCESS_ENDED": "060000007333637265740c000000921000000e0000007369676e616c205349474b494c4c",
    "PROCESS_ENDED_ACK": "000000001500000072616e6b203132206465636c617265642064656164000100000000000000",
    "NO_REPLACEMENT": "060000007333637265740200000002000000030000000b0000006e6f64652031206c6f7374",  # version 9
    "REGISTER": "0700000010000000d00700000600000073336372657401ffffff7f010300000000000000" "0300" "01" "0300",
    "REGISTER_ACK": "010000000900000062616420746f6b656e000200000000000000",
    "REPLICA_INFO": ("05000000020000000002000000000000000400000001000000030000000500000007000000010400"
                     "00000000000008000000000000000100000002000000030000000400000005000000060000000700"
                     "0000" "0c000000686f73742d612f6e6f646531"),
    "REPLICA_INFO_EMPTY": "f9ffffff0100000001ffffffff030000000000000000000000",
    "STATUS": ("00000000ffffffffffffffff0000ffffffffffffffff00000000000000000000000000000000000000000000000000"
               "ffffffffffffffff"),
}


@pytest.mark.parametrize("name", sorted(WIRE_SAMPLES))
def test_messages_keep_their_wire_bytes(name):
    type_name, message = WIRE_SAMPLES[name]
    body = nat.encode_message(T[type_name], message)
    assert body.hex() == WIRE_BYTES[name]
    assert nat.decode_message(T[type_name], body) == message


def test_a_failure_domain_is_short_printable_text_refused_at_the_call():
    layout = [{"optimizer_type": 0, "replica_cnt": 2, "rank_list": [0, 1]}]
    processor = nat.Processor(0, 2)
    processor.set_replica(0, layout, "rack3/node1")  # kept, sent once connected
    with pytest.raises(ValueError, match="ReplicaInfo.domain"):
        processor.set_replica(0, layout, "node\n1")
    with pytest.raises(ValueError, match="ReplicaInfo.domain"):
        processor.set_replica(0, layout, "n" * 257)
    with pytest.raises(ValueError, match="ReplicaInfo.domain"):
        nat.decode_message(T["REPLICA_INFO"], struct.pack("<iII", 0, 0, 3) + b"a\x00b")
    assert processor.controller_term() == 0  # registered with no controller yet


def test_leader_gone_is_a_bool_and_controllers_the_last_field_of_register():
    body = nat.encode_message(T["REGISTER"], SAMPLES["REGISTER"])
    assert body[-3:] == b"\x01\x03\x00"
    assert nat.decode_message(T["REGISTER"], body[:-3] + b"\x00" + body[-2:])["leader_gone"] is False
    with pytest.raises(ValueError, match=r"Register\.leader_gone: value 2 out of range 0\.\.1"):
        nat.decode_message(T["REGISTER"], body[:-3] + b"\x02" + body[-2:])
    with pytest.raises(ValueError, match=r"Register\.controllers: needs 2 bytes"):
        nat.decode_message(T["REGISTER"], body[:-2])  # a version 7 body: no controllers
    assert nat.decode_message(T["REGISTER"], body[:-2] + b"\xff\xff")["controllers"] == 65535
    assert nat.FRAME_VERSION == 13
    assert (nat.NOT_THE_LEADER, nat.AWAITING_MAJORITY, nat.NO_MAJORITY) == (2, 3, 4)


def test_the_hot_switch_is_strategy_7_and_the_last_one():
    action = dict(SAMPLES["ACTION"], strategy=7)
    assert nat.decode_message(T["ACTION"], nat.encode_message(T["ACTION"], action))["strategy"] == 7
    with pytest.raises(ValueError, match=r"strategy: value 8 out of range 0\.\.7"):
        nat.decode_message(T["ACTION"], nat.encode_message(T["ACTION"], dict(SAMPLES["ACTION"], strategy=8)))
