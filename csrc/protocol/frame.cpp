#include "protocol/frame.h"

#include <array>
#include <sstream>

namespace mindio {
namespace {

std::array<uint32_t, 256> make_crc_table() {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    return table;
}

void put_le(std::string& out, uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t get_le(const char* p, int bytes) {
    uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
    return value;
}

struct Header {
    uint16_t type;
    uint64_t seq;
    uint32_t body_len;
    uint32_t crc;
};

Header parse_header(const char* p, uint32_t max_body) {
    uint32_t magic = static_cast<uint32_t>(get_le(p, 4));
    if (magic != kMagic) {
        std::ostringstream os;
        os << "bad magic 0x" << std::hex << magic;
        throw ProtocolError(os.str());
    }
    uint16_t version = static_cast<uint16_t>(get_le(p + 4, 2));
    if (version != kVersion) {
        throw ProtocolError("unsupported protocol version " + std::to_string(version) + " (this build speaks " +
                            std::to_string(kVersion) + ")");
    }
    Header h{static_cast<uint16_t>(get_le(p + 6, 2)), get_le(p + 8, 8), static_cast<uint32_t>(get_le(p + 16, 4)),
             static_cast<uint32_t>(get_le(p + 20, 4))};
    if (h.type < kMinMsgType || h.type > kMaxMsgType) {
        throw ProtocolError("unknown message type " + std::to_string(h.type));
    }
    if (h.body_len > max_body) {
        throw ProtocolError("body length " + std::to_string(h.body_len) + " exceeds the limit of " +
                            std::to_string(max_body) + " bytes");
    }
    return h;
}

}  // namespace

uint32_t crc32(const void* data, size_t len) {
    static const std::array<uint32_t, 256> table = make_crc_table();
    const auto* p = static_cast<const uint8_t*>(data);
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

std::string encode_frame(MsgType type, uint64_t seq, const std::string& body) {
    if (body.size() > kMaxBody) {
        throw ProtocolError("refusing to send a body of " + std::to_string(body.size()) + " bytes (limit " +
                            std::to_string(kMaxBody) + ")");
    }
    std::string out;
    out.reserve(kHeaderSize + body.size());
    put_le(out, kMagic, 4);
    put_le(out, kVersion, 2);
    put_le(out, static_cast<uint16_t>(type), 2);
    put_le(out, seq, 8);
    put_le(out, body.size(), 4);
    put_le(out, crc32(body.data(), body.size()), 4);
    out += body;
    return out;
}

bool FrameParser::next(Frame& out) {
    if (buffered() < kHeaderSize) return false;
    // The header is validated as soon as it is complete, so an oversized length is refused before
    // any of its body is buffered.
    Header h = parse_header(buffer_.data() + offset_, max_body_);
    if (buffered() < kHeaderSize + h.body_len) return false;
    const char* body = buffer_.data() + offset_ + kHeaderSize;
    uint32_t actual = crc32(body, h.body_len);
    if (actual != h.crc) {
        std::ostringstream os;
        os << "body checksum mismatch (header 0x" << std::hex << h.crc << ", body 0x" << actual << ")";
        throw ProtocolError(os.str());
    }
    out.type = static_cast<MsgType>(h.type);
    out.seq = h.seq;
    out.body.assign(body, h.body_len);
    offset_ += kHeaderSize + h.body_len;
    if (offset_ > 65536 && offset_ * 2 > buffer_.size()) {
        buffer_.erase(0, offset_);
        offset_ = 0;
    }
    return true;
}

Frame decode_frame(const std::string& bytes) {
    FrameParser parser;
    parser.feed(bytes.data(), bytes.size());
    Frame frame;
    if (!parser.next(frame)) {
        throw ProtocolError("truncated frame: " + std::to_string(bytes.size()) + " bytes");
    }
    if (parser.buffered()) {
        throw ProtocolError(std::to_string(parser.buffered()) + " trailing bytes after the frame");
    }
    return frame;
}

}  // namespace mindio
