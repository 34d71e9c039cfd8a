// Reading tunables from the environment. A malformed or out-of-range value is an error that names
// the variable, the value and the accepted range: a typo must not silently fall back to a default.
#pragma once
#include <string>

namespace mindio {

long env_int(const char* name, long fallback, long lo, long hi);
double env_number(const char* name, double fallback, double lo, double hi, const char* unit);  // unit: for errors
double env_seconds(const char* name, double fallback, double lo, double hi);
std::string env_string(const char* name, const std::string& fallback = "");

}  // namespace mindio
