#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace mindio {
namespace {

sockaddr_in resolve(const std::string& host, int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (host.empty() || host == "0.0.0.0") {
        addr.sin_addr.s_addr = htonl(INADDR_ANY);
        return addr;
    }
    if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_INET;
    int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (rc != 0 || !found) throw NetError("cannot resolve host '" + host + "': " + gai_strerror(rc));
    addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
    freeaddrinfo(found);
    return addr;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_user_timeout(int fd, int timeout_ms) {
    unsigned int ms = static_cast<unsigned int>(timeout_ms);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

int listen_tcp(const std::string& host, int port, int* bound_port) {
    if (port < 0 || port > 65535) throw NetError("port " + std::to_string(port) + " is out of range 0..65535");
    sockaddr_in addr = resolve(host, port);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw NetError(errno_text("socket"));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 || ::listen(fd, 4096) < 0) {
        std::string why = errno_text(("bind/listen " + host + ":" + std::to_string(port)).c_str());
        ::close(fd);
        throw NetError(why);
    }
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    *bound_port = ntohs(addr.sin_port);
    set_nonblocking(fd);
    return fd;
}

int connect_tcp(const std::string& host, int port, int timeout_ms) {
    sockaddr_in addr = resolve(host, port);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw NetError(errno_text("socket"));
    set_nonblocking(fd);
    std::string where = host + ":" + std::to_string(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 && errno != EINPROGRESS) {
        const int code = errno;
        std::string why = errno_text(("connect " + where).c_str());
        ::close(fd);
        throw NetError(why, code);
    }
    pollfd p{fd, POLLOUT, 0};
    int rc = ::poll(&p, 1, timeout_ms);
    int err = 0;
    socklen_t len = sizeof err;
    if (rc <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
        const int code = rc == 0 ? ETIMEDOUT : err ? err : errno;
        ::close(fd);
        throw NetError("connect " + where + ": " + (rc == 0 ? std::string("timed out") : std::strerror(code)), code);
    }
    set_nodelay(fd);
    return fd;
}

bool send_all(int fd, const std::string& data, int timeout_ms, std::string* error, int* code) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    size_t sent = 0;
    while (sent < data.size()) {
        ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            if (code) *code = errno;
            *error = errno_text("send");
            return false;
        }
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            if (code) *code = ETIMEDOUT;
            *error = "send timed out after " + std::to_string(timeout_ms) + " ms";
            return false;
        }
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, static_cast<int>(left.count()));
    }
    return true;
}

SendResult send_pending(int fd, std::string& pending, std::string* error) {
    while (!pending.empty()) {
        ssize_t n = ::send(fd, pending.data(), pending.size(), MSG_NOSIGNAL);
        if (n > 0) {
            pending.erase(0, static_cast<size_t>(n));
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return SendResult::Blocked;
        *error = std::strerror(errno);
        return SendResult::Failed;
    }
    return SendResult::Done;
}

}  // namespace mindio
