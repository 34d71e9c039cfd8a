// Small blocking-with-timeout socket helpers. Every call that can wait takes a timeout.
#pragma once
#include <stdexcept>
#include <string>

namespace mindio {

struct NetError : std::runtime_error {
    explicit NetError(const std::string& what, int code = 0) : std::runtime_error(what), code(code) {}
    int code;  // the errno that made it, 0 when none (ECONNREFUSED: the peer's host answered, nothing listens)
};

// Listens on host:port (port 0 picks a free one); returns the fd and sets *bound_port.
int listen_tcp(const std::string& host, int port, int* bound_port);
// Connects within timeout_ms; throws NetError with the reason (and its errno in NetError::code).
int connect_tcp(const std::string& host, int port, int timeout_ms);
void set_nonblocking(int fd);
void set_nodelay(int fd);
// Data unacknowledged by the peer's host for this long aborts the connection (TCP_USER_TIMEOUT): a peer
// whose host vanished without a reset is noticed on the next heartbeat, not after minutes of
// retransmissions. A busy peer process still acknowledges (its kernel does).
void set_user_timeout(int fd, int timeout_ms);
// Writes all of `data` within timeout_ms on a blocking or non-blocking fd; false (and *error, and the errno
// in *code when given: ETIMEDOUT when the time ran out) on failure.
bool send_all(int fd, const std::string& data, int timeout_ms, std::string* error, int* code = nullptr);

enum class SendResult { Done, Blocked, Failed };
// For an event loop's output buffer: sends the front of `pending` on a non-blocking fd until it is
// empty (Done) or the socket is full (Blocked), erasing what went out. Failed: the connection is
// unusable and *error says why (errno's text).
SendResult send_pending(int fd, std::string& pending, std::string* error);
void close_fd(int& fd);

}  // namespace mindio
