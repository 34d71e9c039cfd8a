// The controller's transport: one epoll thread owns every socket. Complete frames and closed
// connections are handed to a Listener outside the lock; other threads queue sends and closes.
// A malformed frame, a connection that does not authenticate in time, or a frame that stays
// incomplete too long closes that connection only, with a logged reason.
//
// What an unauthenticated peer can cost is bounded: its frames' bodies are capped (kMaxUnauthBody, a
// Register is far smaller), it may send one frame before it is answered (authenticate() or close()),
// it is read a few KiB at a time, and at most max_unauthenticated such connections are open (the rest
// are closed at accept). At the fd limit accepting pauses (kAcceptBackoff) instead of spinning.
//
// With TLS (set_tls before start) each connection is a TLS session, its handshake run inside its reads;
// a peer that never completes it is closed at the registration deadline like any unregistered one.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net/socket.h"
#include "net/tls.h"
#include "protocol/frame.h"

namespace mindio {

class Server {
public:
    struct Listener {
        virtual ~Listener() = default;
        virtual void on_frame(uint64_t conn, Frame&& frame) = 0;
        virtual void on_closed(uint64_t conn, const std::string& reason) = 0;
    };
    struct Stats {
        uint64_t accepted = 0, rejected = 0, frames = 0;
        uint64_t over_cap = 0;       // connections closed at accept: too many unauthenticated ones open
        uint64_t accept_pauses = 0;  // times accepting paused at the fd limit
    };
    // The same bytes for several connections.
    struct Outgoing {
        std::vector<uint64_t> conns;
        std::string bytes;
    };

    Server(Listener& listener, int auth_timeout_ms, int frame_timeout_ms, size_t max_unauthenticated);
    ~Server();
    void set_tls(std::shared_ptr<TlsContext> tls) { tls_ = std::move(tls); }  // before start(); null: plain TCP
    int start(const std::string& host, int port);  // returns the bound port
    void stop();
    void send(uint64_t conn, std::string bytes);
    // Queues each group's bytes on its connections, in order, under one lock, and wakes the I/O
    // thread once: a broadcast to N ranks costs one lock and one wake-up instead of N of each, and
    // groups queued together that share a connection leave it in the same write.
    void send(const std::vector<Outgoing>& batch);
    void close(uint64_t conn, const std::string& reason);
    void authenticate(uint64_t conn);  // the connection registered: no auth deadline any more
    // Waits (at most timeout_ms) until the queued sends and close requests are carried out.
    void drain(int timeout_ms);
    Stats stats() const;

private:
    using Clock = std::chrono::steady_clock;
    struct Conn {
        int fd = -1;
        std::unique_ptr<TlsSession> tls;
        FrameParser parser;
        std::string out;
        bool authenticated = false;
        bool handed_frame = false;  // unauthenticated and its one frame already handed to the listener
        bool want_out = false;
        Clock::time_point auth_deadline;
        Clock::time_point partial_since;
        bool partial = false;
        std::string close_reason;  // set by close(): the loop closes it after flushing nothing more
    };
    struct Closed {
        uint64_t conn;
        std::string reason;
    };

    void loop();
    void accept_all();
    void pause_accepting(int error);
    void resume_accepting_if_due();
    void note_over_cap_locked();
    void read_conn(uint64_t id, std::vector<std::pair<uint64_t, Frame>>& frames, std::vector<Closed>& closed);
    // Reads what is there (the budget's worth at most): bytes, or sets *eof / *error.
    size_t receive_locked(Conn& c, char* buf, size_t want, bool* eof, std::string* error);
    SendResult send_locked(Conn& c, std::string* error);
    void flush_locked(uint64_t id, Conn& c, std::vector<Closed>& closed);
    void drop_locked(uint64_t id, const std::string& reason, std::vector<Closed>& closed);
    void sweep_locked(std::vector<Closed>& closed);
    void wake();

    Listener& listener_;
    const int auth_timeout_ms_, frame_timeout_ms_;
    const size_t max_unauthenticated_;
    size_t unauthenticated_ = 0;
    bool accept_paused_ = false, over_cap_ = false;  // an episode in progress (logged at its start and end)
    Clock::time_point accept_paused_since_, accept_resume_at_;
    uint64_t over_cap_in_episode_ = 0;
    int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
    std::atomic<bool> running_{false};
    std::thread thread_;
    mutable std::mutex mu_;
    std::map<uint64_t, Conn> conns_;
    // The few connections a loop turn must look at, so that a turn costs O(active), not O(all):
    // dirty_ has queued output or a close request; watch_ has a deadline (not yet registered, or a
    // frame half received). Scanning every connection on every wake-up made a 16k-rank controller
    // spend its time walking idle connections.
    std::set<uint64_t> dirty_, watch_;
    std::set<uint64_t> tls_buffered_;  // decrypted bytes wait in the session: read again without an epoll event
    std::shared_ptr<TlsContext> tls_;
    uint64_t next_id_ = 1;
    Stats stats_;
};

}  // namespace mindio
