#include "common/env.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace mindio {

long env_int(const char* name, long fallback, long lo, long hi) {
    const char* raw = std::getenv(name);
    if (!raw || !*raw) return fallback;
    char* end = nullptr;
    errno = 0;
    long value = std::strtol(raw, &end, 10);
    if (errno || *end != '\0') {
        throw std::invalid_argument(std::string(name) + "='" + raw + "' is not an integer");
    }
    if (value < lo || value > hi) {
        std::ostringstream os;
        os << name << "=" << value << " is out of range [" << lo << ", " << hi << "]";
        throw std::invalid_argument(os.str());
    }
    return value;
}

double env_number(const char* name, double fallback, double lo, double hi, const char* unit) {
    const char* raw = std::getenv(name);
    if (!raw || !*raw) return fallback;
    char* end = nullptr;
    errno = 0;
    double value = std::strtod(raw, &end);
    if (errno || *end != '\0') {
        throw std::invalid_argument(std::string(name) + "='" + raw + "' is not a number of " + unit);
    }
    if (!(value >= lo && value <= hi)) {
        std::ostringstream os;
        os << name << "=" << raw << " is out of range [" << lo << ", " << hi << "] " << unit;
        throw std::invalid_argument(os.str());
    }
    return value;
}

double env_seconds(const char* name, double fallback, double lo, double hi) {
    return env_number(name, fallback, lo, hi, "seconds");
}

std::string env_string(const char* name, const std::string& fallback) {
    const char* raw = std::getenv(name);
    return raw ? std::string(raw) : fallback;
}

}  // namespace mindio
