// The state-machine thread's wake-up period, shared by the files that hold Controller's members
// (internal to csrc/controller).
#pragma once
#include <chrono>

namespace mindio {

inline constexpr auto kTick = std::chrono::milliseconds(20);

}  // namespace mindio
