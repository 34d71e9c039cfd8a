#include "net/server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/thread_name.h"
#include "net/socket.h"

namespace mindio {
namespace {

constexpr size_t kMaxPendingOut = 64u * 1024u * 1024u;  // a peer this far behind is not reading
constexpr size_t kReadBudget = 1u << 20;                // per wake-up, so one peer cannot starve the rest
constexpr size_t kUnauthReadBudget = 8u * 1024u;        // per wake-up, for a peer that has not registered
constexpr uint32_t kMaxUnauthBody = 4096;               // a Register or ProcessEnded is well under 1 KiB
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);  // between accept attempts at the fd limit
constexpr uint64_t kListenTag = 0, kWakeTag = ~0ull;
constexpr const char* kLog = "server";
constexpr size_t kLogFlushFrom = 256;  // loop turns that write to this many connections are logged (debug)

}  // namespace

Server::Server(Listener& listener, int auth_timeout_ms, int frame_timeout_ms, size_t max_unauthenticated)
    : listener_(listener),
      auth_timeout_ms_(auth_timeout_ms),
      frame_timeout_ms_(frame_timeout_ms),
      max_unauthenticated_(max_unauthenticated) {}

Server::~Server() { stop(); }

int Server::start(const std::string& host, int port) {
    int bound = 0;
    listen_fd_ = listen_tcp(host, port, &bound);
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenTag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    ev.data.u64 = kWakeTag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    running_ = true;
    thread_ = std::thread([this] {
        name_this_thread("mindio-ctl-net");
        loop();
    });
    return bound;
}

void Server::stop() {
    if (!running_.exchange(false)) return;
    wake();
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, c] : conns_) {
        c.tls.reset();
        close_fd(c.fd);
    }
    conns_.clear();
    close_fd(listen_fd_);
    close_fd(epoll_fd_);
    close_fd(wake_fd_);
}

void Server::wake() {
    uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
}

void Server::send(uint64_t conn, std::string bytes) { send({Outgoing{{conn}, std::move(bytes)}}); }

void Server::send(const std::vector<Outgoing>& batch) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& group : batch) {
            for (uint64_t conn : group.conns) {
                auto it = conns_.find(conn);
                if (it == conns_.end() || !it->second.close_reason.empty()) continue;
                it->second.out += group.bytes;
                dirty_.insert(conn);
            }
        }
    }
    wake();
}

void Server::close(uint64_t conn, const std::string& reason) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = conns_.find(conn);
        if (it == conns_.end()) return;
        it->second.close_reason = reason.empty() ? "closed by controller" : reason;
        dirty_.insert(conn);
    }
    wake();
}

void Server::authenticate(uint64_t conn) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = conns_.find(conn);
    if (it == conns_.end() || it->second.authenticated) return;
    it->second.authenticated = true;
    it->second.parser.set_max_body(kMaxBody);
    --unauthenticated_;
}

void Server::drain(int timeout_ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (running_ && Clock::now() < deadline) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (dirty_.empty()) return;
        }
        wake();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

Server::Stats Server::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
}

void Server::loop() {
    std::vector<epoll_event> events(512);
    while (running_) {
        int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 50);
        resume_accepting_if_due();
        std::vector<std::pair<uint64_t, Frame>> frames;
        std::vector<Closed> closed;
        for (int i = 0; i < n; ++i) {
            uint64_t tag = events[i].data.u64;
            if (tag == kListenTag) {
                accept_all();
            } else if (tag == kWakeTag) {
                uint64_t drained;
                (void)!::read(wake_fd_, &drained, sizeof drained);
            } else if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                read_conn(tag, frames, closed);
            }
        }
        std::set<uint64_t> buffered;
        {
            std::lock_guard<std::mutex> lock(mu_);
            buffered.swap(tls_buffered_);
        }
        for (uint64_t id : buffered) read_conn(id, frames, closed);
        {
            std::lock_guard<std::mutex> lock(mu_);
            sweep_locked(closed);
        }
        for (auto& [conn, frame] : frames) listener_.on_frame(conn, std::move(frame));
        for (auto& c : closed) listener_.on_closed(c.conn, c.reason);
    }
}

void Server::accept_all() {
    while (true) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) pause_accepting(errno);
            return;
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (accept_paused_) {
            double ms = std::chrono::duration<double, std::milli>(Clock::now() - accept_paused_since_).count();
            LOG_WARN(kLog, -1, "accepting connections again after " << static_cast<int64_t>(ms) << " ms at the fd limit");
            accept_paused_ = false;
        }
        if (unauthenticated_ >= max_unauthenticated_) {
            close_fd(fd);
            note_over_cap_locked();
            continue;
        }
        if (over_cap_) {
            LOG_WARN(kLog, -1, "accepting connections again: " << over_cap_in_episode_ << " were closed at accept while "
                                   << max_unauthenticated_ << " unregistered connections were open");
            over_cap_ = false;
        }
        set_nodelay(fd);
        uint64_t id = next_id_++;
        Conn& c = conns_[id];
        c.fd = fd;
        if (tls_) c.tls = std::make_unique<TlsSession>(*tls_, fd);
        c.auth_deadline = Clock::now() + std::chrono::milliseconds(auth_timeout_ms_);
        c.parser.set_max_body(kMaxUnauthBody);
        ++unauthenticated_;
        watch_.insert(id);
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = id;
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
        ++stats_.accepted;
    }
}

void Server::note_over_cap_locked() {
    ++stats_.over_cap;
    if (!over_cap_) {
        LOG_WARN(kLog, -1, "closing new connections at accept: " << max_unauthenticated_
                               << " connections that have not registered are open (the cap)");
        over_cap_ = true;
        over_cap_in_episode_ = 0;
    }
    ++over_cap_in_episode_;
}

// At the fd limit the listening socket stays readable and accept fails at once: left in the epoll set it
// would wake the loop without pause. It leaves the set and is tried again every kAcceptBackoff.
void Server::pause_accepting(int error) {
    epoll_event ev{};
    ev.events = 0;
    ev.data.u64 = kListenTag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.accept_pauses;
    accept_resume_at_ = Clock::now() + kAcceptBackoff;
    if (!accept_paused_) {
        LOG_WARN(kLog, -1, "cannot accept connections (" << std::strerror(error) << "): trying again every "
                               << kAcceptBackoff.count() << " ms until descriptors are free");
        accept_paused_ = true;
        accept_paused_since_ = Clock::now();
    }
}

void Server::resume_accepting_if_due() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!accept_paused_ || Clock::now() < accept_resume_at_) return;
        accept_resume_at_ = Clock::now() + kAcceptBackoff;  // accept_all pauses it again, or clears the flag
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenTag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
}

void Server::read_conn(uint64_t id, std::vector<std::pair<uint64_t, Frame>>& frames, std::vector<Closed>& closed) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn& c = it->second;
    if (!c.close_reason.empty()) return;  // answered and closing (this loop turn): nothing more is read
    char buf[65536];
    size_t budget = c.authenticated ? kReadBudget : kUnauthReadBudget;
    bool eof = false;
    std::string error;
    while (budget > 0 && !eof && error.empty()) {
        size_t want = std::min(sizeof buf, budget);
        size_t got = receive_locked(c, buf, want, &eof, &error);
        if (got == 0) break;
        c.parser.feed(buf, got);
        budget -= std::min(budget, got);
        // A short read of a plain socket emptied it: the next recv would only say EAGAIN (one syscall per
        // frame saved; epoll is level-triggered, so bytes or an EOF arriving later are reported). A TLS
        // session hands out one record per read: it is read until it would block.
        if (!c.tls && got < want) break;
    }
    if (c.tls && c.tls->buffered()) tls_buffered_.insert(id);
    try {
        Frame frame;
        while (c.parser.next(frame)) {
            if (!c.authenticated) {
                // A processor or launcher waits for the answer to its first frame; a second one before
                // it is a flood (refused registrations were each handled, stored and logged).
                if (c.handed_frame) throw ProtocolError("a second frame before the first was answered");
                c.handed_frame = true;
            }
            frames.emplace_back(id, std::move(frame));
            ++stats_.frames;
        }
    } catch (const ProtocolError& e) {
        ++stats_.rejected;
        drop_locked(id, std::string("malformed frame: ") + e.what(), closed);
        return;
    }
    if (c.parser.buffered() && !c.partial) c.partial_since = Clock::now();
    c.partial = c.parser.buffered() > 0;
    if (c.partial) watch_.insert(id);
    if (eof || !error.empty()) {
        if (c.partial) ++stats_.rejected;
        drop_locked(id, c.partial ? "truncated frame: connection closed with " + std::to_string(c.parser.buffered()) +
                                        " bytes of an incomplete frame"
                                  : (eof ? "connection closed by peer" : "receive failed: " + error),
                    closed);
    }
}

size_t Server::receive_locked(Conn& c, char* buf, size_t want, bool* eof, std::string* error) {
    if (!c.tls) {
        ssize_t got = ::recv(c.fd, buf, want, 0);
        if (got > 0) return static_cast<size_t>(got);
        if (got == 0) *eof = true;
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) *error = std::strerror(errno);
        return 0;
    }
    size_t got = 0;
    IoStatus s = c.tls->read(buf, want, &got, error);
    if (s == IoStatus::Closed) *eof = true;
    if (s == IoStatus::Failed && error->empty()) *error = "TLS failed";
    return s == IoStatus::Ok ? got : 0;
}

SendResult Server::send_locked(Conn& c, std::string* error) {
    if (!c.tls) return send_pending(c.fd, c.out, error);
    while (!c.out.empty()) {
        size_t sent = 0;
        IoStatus s = c.tls->write(c.out.data(), c.out.size(), &sent, error);
        if (s == IoStatus::Ok) {
            c.out.erase(0, sent);
            continue;
        }
        if (s == IoStatus::WouldBlock) return SendResult::Blocked;
        if (s == IoStatus::Closed) *error = "the peer closed the TLS connection";
        return SendResult::Failed;
    }
    return SendResult::Done;
}

void Server::flush_locked(uint64_t id, Conn& c, std::vector<Closed>& closed) {
    std::string error;
    if (send_locked(c, &error) == SendResult::Failed) {
        drop_locked(id, "send failed: " + error, closed);
        return;
    }
    if (c.out.size() > kMaxPendingOut) {
        drop_locked(id, "peer is not reading (" + std::to_string(c.out.size()) + " bytes pending)", closed);
        return;
    }
    bool want = !c.out.empty();
    if (want != c.want_out) {
        epoll_event ev{};
        ev.events = EPOLLIN | (want ? EPOLLOUT : 0);
        ev.data.u64 = id;
        epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    }
    c.want_out = want;
}

void Server::drop_locked(uint64_t id, const std::string& reason, std::vector<Closed>& closed) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
    it->second.tls.reset();
    close_fd(it->second.fd);
    if (!it->second.authenticated) --unauthenticated_;
    conns_.erase(it);
    dirty_.erase(id);
    watch_.erase(id);
    tls_buffered_.erase(id);
    closed.push_back({id, reason});
}

// Flushes queued output and enforces the close requests and deadlines, once per loop turn. Only
// the connections in dirty_ and watch_ are visited.
void Server::sweep_locked(std::vector<Closed>& closed) {
    auto now = Clock::now();
    std::vector<std::pair<uint64_t, std::string>> expired;
    for (auto w = watch_.begin(); w != watch_.end();) {
        auto it = conns_.find(*w);
        Conn* c = it == conns_.end() ? nullptr : &it->second;
        if (!c || (c->authenticated && !c->partial)) {
            w = watch_.erase(w);  // nothing left to time out
            continue;
        }
        if (!c->authenticated && now > c->auth_deadline) {
            ++stats_.rejected;
            expired.emplace_back(*w, "did not register within " + std::to_string(auth_timeout_ms_) + " ms");
        } else if (c->partial && now - c->partial_since > std::chrono::milliseconds(frame_timeout_ms_)) {
            ++stats_.rejected;
            expired.emplace_back(*w, "frame incomplete for more than " + std::to_string(frame_timeout_ms_) + " ms");
        }
        ++w;
    }
    std::set<uint64_t> dirty;
    dirty.swap(dirty_);
    for (uint64_t id : dirty) {
        auto it = conns_.find(id);
        if (it != conns_.end() && !it->second.close_reason.empty()) expired.emplace_back(id, it->second.close_reason);
    }
    for (auto& [id, reason] : expired) {
        auto it = conns_.find(id);
        if (it != conns_.end() && !it->second.out.empty()) {
            std::string ignored;  // a refusal should reach the peer
            if (it->second.tls) it->second.tls->write_all(it->second.out, 100, &ignored);
            else send_all(it->second.fd, it->second.out, 100, &ignored);
        }
        drop_locked(id, reason, closed);
    }
    auto flush_start = Clock::now();
    size_t flushed = 0;
    for (uint64_t id : dirty) {
        auto it = conns_.find(id);
        if (it == conns_.end() || it->second.out.empty()) continue;
        flush_locked(id, it->second, closed);
        ++flushed;
        it = conns_.find(id);
        if (it != conns_.end() && !it->second.out.empty()) dirty_.insert(id);  // the peer's window is full: next turn
    }
    // A broadcast's cost is here, one send(2) per connection: say how long it took.
    if (flushed >= kLogFlushFrom) {
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - flush_start).count();
        LOG_DEBUG(kLog, -1, "wrote to " << flushed << " connections in " << ms << " ms");
    }
}

}  // namespace mindio
