// Text of rank lists as the controller logs them and its tests read them: "[1,3]".
#pragma once
#include <sstream>
#include <string>

namespace mindio {

template <typename Container>
std::string list_text(const Container& items) {
    std::ostringstream os;
    os << "[";
    bool first = true;
    for (const auto& x : items) {
        os << (first ? "" : ",") << x;
        first = false;
    }
    os << "]";
    return os.str();
}

}  // namespace mindio
