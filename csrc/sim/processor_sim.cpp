#include "sim/processor_sim.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "net/socket.h"

namespace mindio {
namespace {

constexpr uint64_t kWakeTag = ~0ull;

double seconds(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}

double seconds(const timespec& ts) { return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9; }

// A kernel receive timestamp (CLOCK_REALTIME) on the steady clock, through the clocks' offset now.
double steady_of_realtime(const timespec& ts) {
    timespec real, mono;
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    return seconds(ts) - (seconds(real) - seconds(mono));
}

}  // namespace

ProcessorSim::ProcessorSim(SimConfig cfg) : cfg_(std::move(cfg)) {
    if (cfg_.count < 1) throw std::invalid_argument("count must be >= 1");
    if (cfg_.first_rank < 0 || cfg_.first_rank + cfg_.count > cfg_.world_size) {
        throw std::invalid_argument("ranks " + std::to_string(cfg_.first_rank) + ".." +
                                    std::to_string(cfg_.first_rank + cfg_.count - 1) + " are not inside world size " +
                                    std::to_string(cfg_.world_size));
    }
    if (cfg_.dp_size < 1 || cfg_.world_size % cfg_.dp_size || cfg_.dp_size % cfg_.replica_cnt) {
        throw std::invalid_argument("dp_size must divide world_size and be divisible by replica_cnt");
    }
    if (cfg_.heartbeat_ms < 10) throw std::invalid_argument("heartbeat period must be >= 10 ms");
    conns_.resize(cfg_.count);
    stops_.assign(cfg_.count, -1.0);
    stop_arrivals_.assign(cfg_.count, -1.0);
}

ProcessorSim::~ProcessorSim() { stop(); }

void ProcessorSim::start() {
    if (running_) throw std::logic_error("simulator already started");
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0) throw std::runtime_error(std::string("epoll/eventfd: ") + std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeTag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    running_ = true;
    thread_ = std::thread([this] { loop(); });
}

void ProcessorSim::stop() {
    if (!running_.exchange(false)) return;
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    if (thread_.joinable()) thread_.join();
    for (auto& c : conns_) close_fd(c.fd);
    close_fd(epoll_fd_);
    close_fd(wake_fd_);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : reports_) r->error = "simulator stopped", r->done = true;
    reports_.clear();
    cv_.notify_all();
}

double ProcessorSim::report_error(int rank, uint8_t state, const std::string& code, int timeout_ms) {
    int i = rank - cfg_.first_rank;
    if (i < 0 || i >= cfg_.count) throw std::invalid_argument("rank " + std::to_string(rank) + " is not simulated here");
    // Shared with the loop thread, which may still hold it after a timed-out wait.
    auto report = std::make_shared<Report>(Report{rank, state, code});
    std::unique_lock<std::mutex> lock(mu_);
    if (!running_) throw std::runtime_error("simulator is not running");
    reports_.push_back(report);
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return report->done; })) {
        throw std::runtime_error("error report of rank " + std::to_string(rank) + " not sent within " +
                                 std::to_string(timeout_ms) + " ms");
    }
    if (!report->error.empty()) throw std::runtime_error(report->error);
    return report->sent_at;
}

std::vector<double> ProcessorSim::stop_times() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stops_;
}

std::vector<double> ProcessorSim::stop_arrivals() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_arrivals_;
}

void ProcessorSim::clear_stops() {
    std::lock_guard<std::mutex> lock(mu_);
    std::fill(stops_.begin(), stops_.end(), -1.0);
    std::fill(stop_arrivals_.begin(), stop_arrivals_.end(), -1.0);
}

std::map<std::string, uint64_t> ProcessorSim::stats() const {
    return {{"ready", ready_},           {"closed", closed_},         {"failed", failed_},
            {"heartbeats", heartbeats_}, {"actions", actions_},       {"stops", stops_received_},
            {"duplicates", duplicates_}, {"connect_retries", connect_retries_}};
}

std::string ProcessorSim::first_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
}

void ProcessorSim::note_error(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = why;
}

// ---- loop thread -------------------------------------------------------------------------------

void ProcessorSim::loop() {
    std::vector<epoll_event> events(1024);
    next_deadline_check_ = Clock::now();
    while (running_) {
        open_more();
        int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms());
        for (int k = 0; k < n; ++k) {
            if (events[k].data.u64 == kWakeTag) {
                uint64_t drained;
                (void)!::read(wake_fd_, &drained, sizeof drained);
                continue;
            }
            on_event(static_cast<int>(events[k].data.u64), events[k].events);
        }
        run_reports();
        send_due_beats();
        check_deadlines();
    }
}

// Until the next heartbeat is due, rounded up (rounding down spins on epoll_wait(0) for the last
// millisecond before every beat), at most 50 ms so that connects and deadlines keep moving.
int ProcessorSim::timeout_ms() const {
    if (beats_.empty()) return 50;
    auto left_us = std::chrono::duration_cast<std::chrono::microseconds>(beats_.top().first - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>((left_us + 999) / 1000, 0, 50));
}

void ProcessorSim::open_more() {
    while (in_flight_ < cfg_.connect_window && next_to_open_ < cfg_.count) open(next_to_open_++);
}

void ProcessorSim::open(int i) {
    Conn& c = conns_[i];
    c = Conn{-1, Phase::Connecting, c.attempts + 1};
    ++in_flight_;
    c.deadline = Clock::now() + std::chrono::milliseconds(cfg_.connect_timeout_ms);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(cfg_.port));
    if (inet_pton(AF_INET, cfg_.host.c_str(), &addr.sin_addr) != 1) return retry_or_fail(i, "bad IPv4 address " + cfg_.host);
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) return retry_or_fail(i, std::string("socket: ") + std::strerror(errno));
    set_nodelay(c.fd);
    int one = 1;
    setsockopt(c.fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);  // receive times for stop_arrivals()
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 && errno != EINPROGRESS) {
        return retry_or_fail(i, std::string("connect: ") + std::strerror(errno));
    }
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(i);
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.fd, &ev);
}

void ProcessorSim::retry_or_fail(int i, const std::string& why) {
    Conn& c = conns_[i];
    if (c.fd >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
    close_fd(c.fd);
    --in_flight_;
    std::string what = "rank " + std::to_string(cfg_.first_rank + i) + ": " + why;
    if (c.attempts < cfg_.connect_attempts) {
        ++connect_retries_;
        return open(i);
    }
    c.phase = Phase::Closed;
    ++failed_;
    note_error(what + " (after " + std::to_string(c.attempts) + " attempts)");
}

void ProcessorSim::on_event(int i, uint32_t events) {
    Conn& c = conns_[i];
    if (c.phase == Phase::Connecting) {
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) on_connected(i);
        return;
    }
    if (c.phase == Phase::Closed) return;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(i);
    if (conns_[i].phase != Phase::Closed && (events & EPOLLOUT)) flush(i);
}

void ProcessorSim::on_connected(int i) {
    Conn& c = conns_[i];
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
        return retry_or_fail(i, std::string("connect: ") + std::strerror(err ? err : errno));
    }
    c.phase = Phase::Registering;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(i);
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    RegisterMsg reg{cfg_.first_rank + i, cfg_.world_size, cfg_.heartbeat_ms, cfg_.token};
    send(i, encode_frame(MsgType::Register, 0, encode(reg)));
}

void ProcessorSim::on_readable(int i) {
    Conn& c = conns_[i];
    char buf[16384];
    char control[CMSG_SPACE(sizeof(timespec))];
    c.last_rx = -1;  // a frame completed now was received by the reads of this call
    while (true) {
        iovec iov{buf, sizeof buf};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        ssize_t got = ::recvmsg(c.fd, &msg, 0);
        if (got > 0) {
            c.parser.feed(buf, static_cast<size_t>(got));
            for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                    timespec ts;
                    std::memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                    c.last_rx = steady_of_realtime(ts);
                }
            }
            if (static_cast<size_t>(got) < sizeof buf) break;  // drained; epoll (level) reports what comes later
            continue;
        }
        if (got == 0) return close_conn(i, "closed by the controller");
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno != EINTR) return close_conn(i, std::string("recv: ") + std::strerror(errno));
    }
    try {
        Frame f;
        while (conns_[i].phase != Phase::Closed && conns_[i].parser.next(f)) on_frame(i, f);
    } catch (const ProtocolError& e) {
        return close_conn(i, std::string("malformed frame from the controller: ") + e.what());
    }
    // The replies to every action read here leave in one write (PRELOCK and STOP arrive together).
    if (conns_[i].phase != Phase::Closed) flush(i);
}

void ProcessorSim::on_frame(int i, const Frame& f) {
    Conn& c = conns_[i];
    int rank = cfg_.first_rank + i;
    if (f.type == MsgType::Action) return on_action(i, f);
    if (f.type != MsgType::RegisterAck || c.phase != Phase::Registering) {
        return close_conn(i, "unexpected message type " + std::to_string(int(f.type)));
    }
    auto ack = decode_as<RegisterAckMsg>(f.body);
    if (ack.result != 0) return close_conn(i, "registration refused: " + ack.message);
    c.phase = Phase::Ready;
    --in_flight_;
    ++ready_;
    // The block of dp_size ranks this rank belongs to, as tft_set_optimizer_replica would report it.
    ReplicaInfoMsg info{rank, {}};
    ReplicaGroupMsg g{0, cfg_.replica_cnt, 0, {}};
    int block = rank - rank % cfg_.dp_size;
    for (int r = block; r < block + cfg_.dp_size; ++r) g.ranks.push_back(r);
    info.groups.push_back(std::move(g));
    send(i, encode_frame(MsgType::ReplicaInfo, 0, encode(info)));
    send(i, encode_frame(MsgType::Status, 0, encode(RankStatusMsg{rank, 0, RunStatus::Running, DataStatus::Updated})));
    // Spread the first beats over one period, as ranks of a real job start at different moments.
    auto offset = std::chrono::milliseconds(static_cast<int64_t>(cfg_.heartbeat_ms) * i / cfg_.count);
    beats_.push({Clock::now() + offset, i});
}

void ProcessorSim::on_action(int i, const Frame& f) {
    Conn& c = conns_[i];
    auto msg = decode_as<ActionMsg>(f.body);
    if (f.seq < c.last_seq) return;  // stale, as a Processor drops it
    if (f.seq == c.last_seq) {
        ++duplicates_;
        c.out += c.cached_reply;
        return;
    }
    ++actions_;
    if (msg.kind == ActionKind::Stop) {
        ++stops_received_;
        std::lock_guard<std::mutex> lock(mu_);
        stops_[i] = seconds(Clock::now());
        stop_arrivals_[i] = c.last_rx;
    }
    c.last_seq = f.seq;
    c.cached_reply = encode_frame(MsgType::ActionReply, f.seq,
                                  encode(ActionReplyMsg{cfg_.first_rank + i, msg.kind, 0, ""}));
    c.out += c.cached_reply;  // written by on_readable once every frame of the read is handled
}

void ProcessorSim::send(int i, const std::string& bytes) {
    conns_[i].out += bytes;
    flush(i);
}

void ProcessorSim::flush(int i) {
    Conn& c = conns_[i];
    std::string error;
    if (send_pending(c.fd, c.out, &error) == SendResult::Failed) return close_conn(i, "send: " + error);
    bool want = !c.out.empty();
    if (want == c.want_out) return;
    epoll_event ev{};
    ev.events = EPOLLIN | (want ? EPOLLOUT : 0);
    ev.data.u64 = static_cast<uint64_t>(i);
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.want_out = want;
}

void ProcessorSim::close_conn(int i, const std::string& why) {
    Conn& c = conns_[i];
    if (c.phase == Phase::Closed) return;
    if (c.phase == Phase::Registering) --in_flight_;
    if (c.phase == Phase::Ready) --ready_;
    c.phase = Phase::Closed;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
    close_fd(c.fd);
    ++closed_;
    note_error("rank " + std::to_string(cfg_.first_rank + i) + ": " + why);
}

void ProcessorSim::send_due_beats() {
    auto now = Clock::now();
    auto period = std::chrono::milliseconds(cfg_.heartbeat_ms);
    while (!beats_.empty() && beats_.top().first <= now) {
        auto [due, i] = beats_.top();
        beats_.pop();
        if (conns_[i].phase != Phase::Ready) continue;
        int rank = cfg_.first_rank + i;
        send(i, encode_frame(MsgType::Heartbeat, 0, encode(RankStatusMsg{rank, 0, RunStatus::Running, DataStatus::Updated})));
        ++heartbeats_;
        // Keep each rank's phase; a loop that fell a whole period behind does not send a burst.
        beats_.push({std::max(due + period, now), i});
    }
}

// Connects and registrations that take too long, checked a few times a second and only while some
// are in flight (the scan is over every connection, but stops once all have registered).
void ProcessorSim::check_deadlines() {
    auto now = Clock::now();
    if (in_flight_ == 0 || now < next_deadline_check_) return;
    next_deadline_check_ = now + std::chrono::milliseconds(200);
    for (int i = 0; i < next_to_open_; ++i) {
        Conn& c = conns_[i];
        bool waiting = c.phase == Phase::Connecting || c.phase == Phase::Registering;
        if (waiting && now > c.deadline) retry_or_fail(i, "no connection or registration reply in time");
    }
}

void ProcessorSim::run_reports() {
    std::vector<std::shared_ptr<Report>> todo;
    {
        std::lock_guard<std::mutex> lock(mu_);
        todo.swap(reports_);
    }
    if (todo.empty()) return;
    // Written outside mu_: a failing send closes the connection, which takes mu_ to note the error.
    std::vector<std::pair<double, std::string>> outcome;
    for (const auto& r : todo) {
        int i = r->rank - cfg_.first_rank;
        if (conns_[i].phase != Phase::Ready) {
            outcome.emplace_back(-1, "rank " + std::to_string(r->rank) + " is not connected");
            continue;
        }
        double at = seconds(Clock::now());
        send(i, encode_frame(MsgType::ErrorReport, 0, encode(ErrorReportMsg{r->rank, r->state, r->code})));
        outcome.emplace_back(at, conns_[i].phase == Phase::Ready ? "" : "rank " + std::to_string(r->rank) +
                                                                            ": connection lost while reporting");
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t k = 0; k < todo.size(); ++k) {
        todo[k]->sent_at = outcome[k].first;
        todo[k]->error = outcome[k].second;
        todo[k]->done = true;
    }
    cv_.notify_all();
}

}  // namespace mindio
