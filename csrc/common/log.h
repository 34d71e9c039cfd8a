// One log line per event, with wall-clock time, component and rank, to stderr.
// Level from TTP_LOG_LEVEL (DEBUG, INFO, WARNING, ERROR; default INFO), read once.
#pragma once
#include <sstream>
#include <string>

namespace mindio {

enum class LogLevel { Debug = 0, Info = 1, Warning = 2, Error = 3 };

bool log_enabled(LogLevel level);
void log_line(LogLevel level, const char* component, int rank, const std::string& text);

}  // namespace mindio

#define MINDIO_LOG(level, component, rank, expr)                                     \
    do {                                                                             \
        if (::mindio::log_enabled(level)) {                                          \
            std::ostringstream mindio_log_os_;                                       \
            mindio_log_os_ << expr;                                                  \
            ::mindio::log_line(level, component, rank, mindio_log_os_.str());        \
        }                                                                            \
    } while (0)
#define LOG_DEBUG(c, r, e) MINDIO_LOG(::mindio::LogLevel::Debug, c, r, e)
#define LOG_INFO(c, r, e) MINDIO_LOG(::mindio::LogLevel::Info, c, r, e)
#define LOG_WARN(c, r, e) MINDIO_LOG(::mindio::LogLevel::Warning, c, r, e)
#define LOG_ERROR(c, r, e) MINDIO_LOG(::mindio::LogLevel::Error, c, r, e)
