#include "common/log.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include <poll.h>
#include <unistd.h>

namespace mindio {
namespace {

LogLevel level_from_env() {
    const char* value = std::getenv("TTP_LOG_LEVEL");
    if (!value) return LogLevel::Info;
    if (!strcasecmp(value, "DEBUG")) return LogLevel::Debug;
    if (!strcasecmp(value, "WARNING") || !strcasecmp(value, "WARN")) return LogLevel::Warning;
    if (!strcasecmp(value, "ERROR")) return LogLevel::Error;
    return LogLevel::Info;
}

const char* level_name(LogLevel level) {
    switch (level) {
        case LogLevel::Debug: return "DEBUG";
        case LogLevel::Info: return "INFO";
        case LogLevel::Warning: return "WARNING";
        default: return "ERROR";
    }
}

// The controller's I/O thread and the processor's heartbeat thread log. A reader that stops reading
// stderr (a full pipe) would stall them inside fprintf, holding the log lock that every other thread
// of the process then waits for: the controller stops reading heartbeats, a rank stops sending them,
// and a healthy process looks dead. So a line waits at most kStderrWaitMs for stderr; after that the
// reader counts as gone, lines are dropped (and counted) without waiting until stderr takes one again,
// and that line says how many were lost. A reader merely slow under load loses nothing: it has the
// pipe's 64 KiB and a whole second.
constexpr int kStderrWaitMs = 1000;

bool stderr_takes_a_line(int wait_ms) {
    pollfd p{STDERR_FILENO, POLLOUT, 0};
    return ::poll(&p, 1, wait_ms) > 0 && (p.revents & POLLOUT);
}

}  // namespace

bool log_enabled(LogLevel level) {
    static const LogLevel threshold = level_from_env();
    return level >= threshold;
}

void log_line(LogLevel level, const char* component, int rank, const std::string& text) {
    static std::mutex mu;
    auto now = std::chrono::system_clock::now();
    std::time_t seconds = std::chrono::system_clock::to_time_t(now);
    long ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm_buf{};
    localtime_r(&seconds, &tm_buf);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm_buf);
    static uint64_t dropped = 0;
    std::lock_guard<std::mutex> lock(mu);
    if (!stderr_takes_a_line(dropped ? 0 : kStderrWaitMs)) {
        ++dropped;
        return;
    }
    if (dropped) {
        std::fprintf(stderr, "[%s.%03ld] [mindio WARNING] [log rank %d] %llu log lines dropped: stderr took nothing "
                     "for %d ms (nobody read it)\n", stamp, ms, rank, static_cast<unsigned long long>(dropped),
                     kStderrWaitMs);
        dropped = 0;
    }
    std::fprintf(stderr, "[%s.%03ld] [mindio %s] [%s rank %d] %s\n", stamp, ms, level_name(level), component,
                 rank, text.c_str());
}

}  // namespace mindio
