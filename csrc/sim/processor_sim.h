// Simulated processors, a load generator for bench/controller_scale.py: one epoll thread plays
// `count` ranks over as many real TCP connections, each speaking the real wire protocol (Register,
// then ReplicaInfo and Status, a Heartbeat every period, an ActionReply with result 0 to every
// Action, idempotent by sequence number like a Processor). A real Processor costs two threads per
// rank; thousands of them would measure the client host's scheduler, not the controller.
// Not used by training: it exists so that the controller can be measured at tens of thousands of ranks.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"

namespace mindio {

struct SimConfig {
    std::string host = "127.0.0.1";
    int port = 0;
    int first_rank = 0, count = 0, world_size = 0;
    uint32_t heartbeat_ms = 2000;
    // Each rank reports the replica list of its block of dp_size consecutive ranks, so that the
    // controller finds a repair peer and picks online repair, as for a real job.
    int dp_size = 8, replica_cnt = 2;
    std::string token;
    int connect_window = 256;  // registrations in flight at once: a burst past the listen backlog costs SYN retries
    int connect_timeout_ms = 10000;
    int connect_attempts = 3;
};

class ProcessorSim {
public:
    explicit ProcessorSim(SimConfig cfg);
    ~ProcessorSim();
    void start();
    void stop();
    // Sends an ErrorReport from `rank` (one of ours) on the loop thread; returns the steady-clock
    // time in seconds (CLOCK_MONOTONIC, as Python's time.monotonic) at which it was written.
    double report_error(int rank, uint8_t state, const std::string& code, int timeout_ms);
    // Per rank since clear_stops(), -1 for none, steady-clock seconds: when the loop thread handled
    // its last Stop (stop_times), and when the kernel received the bytes that completed it
    // (stop_arrivals: the socket's receive timestamp, SO_TIMESTAMPNS). The difference is the time
    // the frame waited in the socket for this one thread, which plays `count` ranks, to come round.
    std::vector<double> stop_times() const;
    std::vector<double> stop_arrivals() const;
    void clear_stops();
    std::map<std::string, uint64_t> stats() const;
    std::string first_error() const;

private:
    using Clock = std::chrono::steady_clock;
    enum class Phase { Idle, Connecting, Registering, Ready, Closed };
    struct Conn {
        int fd = -1;
        Phase phase = Phase::Idle;
        int attempts = 0;
        Clock::time_point deadline;
        FrameParser parser;
        std::string out;
        bool want_out = false;
        uint64_t last_seq = 0;
        std::string cached_reply;
        double last_rx = -1;  // kernel receive time of the latest bytes read (steady-clock seconds)
    };
    struct Report {
        int rank;
        uint8_t state;
        std::string code;
        double sent_at = -1;
        std::string error;
        bool done = false;
    };
    using Beat = std::pair<Clock::time_point, int>;

    void loop();
    void open_more();
    void open(int i);
    void retry_or_fail(int i, const std::string& why);
    void on_event(int i, uint32_t events);
    void on_connected(int i);
    void on_readable(int i);
    void on_frame(int i, const Frame& f);
    void on_action(int i, const Frame& f);
    void send(int i, const std::string& bytes);
    void flush(int i);
    void close_conn(int i, const std::string& why);
    void send_due_beats();
    void check_deadlines();
    void run_reports();
    void note_error(const std::string& why);
    int timeout_ms() const;

    const SimConfig cfg_;
    std::vector<Conn> conns_;
    int epoll_fd_ = -1, wake_fd_ = -1;
    int next_to_open_ = 0, in_flight_ = 0;
    std::priority_queue<Beat, std::vector<Beat>, std::greater<Beat>> beats_;
    Clock::time_point next_deadline_check_;
    std::atomic<bool> running_{false};
    std::thread thread_;

    mutable std::mutex mu_;  // guards what Python reads: stops_, reports_, error_
    std::condition_variable cv_;
    std::vector<double> stops_, stop_arrivals_;
    std::vector<std::shared_ptr<Report>> reports_;
    std::string error_;

    std::atomic<uint64_t> ready_{0}, closed_{0}, failed_{0}, heartbeats_{0}, actions_{0}, stops_received_{0},
        duplicates_{0}, connect_retries_{0};
};

}  // namespace mindio
