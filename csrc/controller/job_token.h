// The job's token (MINDIO_TOKEN) as the controller checks it in a Register and a launcher's reports.
#pragma once

#include <string>

namespace mindio {

inline constexpr const char* kWrongToken = "wrong token (MINDIO_TOKEN differs)";

// Constant time over the expected token, so the comparison does not leak a prefix match.
inline bool tokens_equal(const std::string& expected, const std::string& given) {
    unsigned char diff = expected.size() == given.size() ? 0 : 1;
    for (size_t i = 0; i < expected.size(); ++i) {
        diff |= static_cast<unsigned char>(expected[i] ^ (i < given.size() ? given[i] : 0));
    }
    return diff == 0;
}

}  // namespace mindio
