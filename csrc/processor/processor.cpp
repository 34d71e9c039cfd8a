#include "processor/processor.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/log.h"
#include "common/thread_name.h"
#include "net/socket.h"

namespace mindio {
namespace {

constexpr const char* kLog = "processor";
// How long a killed controller's process takes, at the most here, to stop accepting on its address.
constexpr auto kDyingLeaderPause = std::chrono::milliseconds(200);
// A pause holds a rank at most this long whatever happens to its controller (which holds one at most
// kMaxPauseHoldMs, controller.h): past it the rank trains on.
constexpr auto kPauseHoldCap = std::chrono::milliseconds(24LL * 3600 * 1000 + 60 * 1000);

// How long the step's section starting or ending waits for a frame that carries it (Processor::defer_status).
constexpr int64_t kDeferredStatusMs = 50;

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// The peer closed a registration unanswered: a controller being torn down does that.
struct ClosedDuringRegistration : ProtocolError {
    using ProtocolError::ProtocolError;
};

int backoff_ms(int attempt, int base_ms) {
    // 1, 2, 4, 8, 10, 10, ... times the base, as the reference.
    int factor = attempt < 4 ? (1 << attempt) : 10;
    return base_ms * factor;
}

}  // namespace

Processor::Processor(ProcessorConfig cfg) : cfg_(std::move(cfg)), joining_(cfg_.restarted) {
    tls_context_ = make_tls_context(cfg_.tls, false);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // -1: deferred statuses wait for the net thread's next poll
}

void Processor::close_link_locked() {
    tls_.reset();
    close_fd(fd_);
}

bool Processor::tls_buffered(int fd) const {
    std::lock_guard<CountedMutex> lock(send_mu_);
    return fd == fd_ && tls_ && tls_->buffered();
}

// Like recv(2) on the link `fd`: bytes, 0 when the controller closed it, -1 with *why empty when nothing
// is there yet, else with the reason. A TLS session is read under send_mu_: a sender writes on it too.
ssize_t Processor::receive(int fd, char* buf, size_t n, std::string* why) {
    std::unique_lock<CountedMutex> lock(send_mu_);
    if (fd != fd_) return -1;  // replaced or closed meanwhile: the loop looks again
    if (!tls_) {
        lock.unlock();
        ssize_t got = ::recv(fd, buf, n, 0);
        if (got < 0 && errno != EAGAIN && errno != EINTR) *why = std::strerror(errno);
        return got;
    }
    size_t got = 0;
    IoStatus s = tls_->read(buf, n, &got, why);
    if (s == IoStatus::Ok) return static_cast<ssize_t>(got);
    if (s == IoStatus::Closed) return 0;
    return -1;
}

Processor::~Processor() {
    stopping_ = true;
    running_ = false;
    cv_.notify_all();
    if (net_thread_.joinable()) net_thread_.join();
    if (worker_thread_.joinable()) {
        if (worker_thread_.get_id() == std::this_thread::get_id()) worker_thread_.detach();
        else worker_thread_.join();
    }
    close_link_locked();
    if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Processor::set_dispatcher(Dispatcher d) {
    std::lock_guard<CountedMutex> lock(mu_);
    dispatcher_ = std::move(d);
}

void Processor::start(const std::vector<Endpoint>& controllers) {
    if (running_) throw std::logic_error("processor already started");
    if (controllers.empty()) throw std::invalid_argument("no controller address given");
    {
        std::lock_guard<CountedMutex> lock(mu_);
        controllers_ = controllers;
        current_ = 0;
    }
    std::string error;
    bool fatal = false, no_majority = false;
    const int attempts = cfg_.retry_times * static_cast<int>(controllers.size());
    for (int attempt = 0; attempt < attempts; ++attempt) {
        if (connect_and_register(&error, &fatal, &no_majority)) break;
        if (fatal && refused_as_job_ends_) throw JobEnding("rank " + std::to_string(cfg_.rank) + ": " + error);
        if (fatal) throw std::runtime_error("rank " + std::to_string(cfg_.rank) + ": " + error);
        if (attempt + 1 == attempts) {
            throw std::runtime_error("rank " + std::to_string(cfg_.rank) + ": could not register with the controller at " +
                                     controller_address() + " after " + std::to_string(attempts) + " attempts: " + error);
        }
        LOG_WARN(kLog, cfg_.rank, "registration attempt " << attempt + 1 << " failed: " << error);
        // One back-off per round: the next controller of the list is tried at once.
        if (try_next_controller(error)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(
                backoff_ms(attempt / static_cast<int>(controllers.size()), cfg_.backoff_base_ms)));
        }
    }
    running_ = true;
    net_thread_ = std::thread([this] {
        name_this_thread("mindio-proc-net");
        net_loop();
    });
    // The worker keeps the processor alive while a handler runs, so a stuck handler cannot make
    // destruction wait forever (stop() detaches it instead).
    auto self = shared_from_this();
    worker_thread_ = std::thread([self] {
        name_this_thread("mindio-proc-act");
        self->worker_loop();
    });
}

void Processor::stop() {
    stopping_ = true;
    if (!running_.exchange(false)) return;
    cv_.notify_all();
    if (net_thread_.joinable()) net_thread_.join();
    {
        std::unique_lock<CountedMutex> lock(mu_);
        bool idle = cv_.wait_for(lock, std::chrono::seconds(5), [&] { return !running_action_; });
        if (!idle) {
            LOG_ERROR(kLog, cfg_.rank, "a handler is still running at shutdown; leaving its thread behind");
            worker_thread_.detach();
        }
    }
    if (worker_thread_.joinable()) worker_thread_.join();
    // Leaving on purpose: the controller logs a departure, not a death, and counts no fault.
    send_frame(encode_frame(MsgType::Goodbye, 0, encode(GoodbyeMsg{cfg_.rank, "tft_destroy_processor"})));
    std::lock_guard<CountedMutex> lock(send_mu_);
    close_link_locked();
}

Endpoint Processor::controller_now() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return controllers_.at(current_);
}

Endpoint Processor::controller_leader() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return term_ > 0 ? leader_ : Endpoint{};
}

std::string Processor::controller_address() const {
    std::lock_guard<CountedMutex> lock(mu_);
    if (controllers_.empty()) return "";
    return controllers_[current_].first + ":" + std::to_string(controllers_[current_].second);
}

void Processor::replace_controller(std::size_t index, const Endpoint& controller) {
    std::lock_guard<CountedMutex> lock(mu_);
    if (index >= controllers_.size()) {
        throw std::out_of_range("controller " + std::to_string(index) + " of a list of " +
                                std::to_string(controllers_.size()));
    }
    controllers_[index] = controller;
}

bool Processor::try_next_controller(const std::string& why) {
    std::lock_guard<CountedMutex> lock(mu_);
    if (controllers_.size() < 2) return true;
    current_ = (current_ + 1) % controllers_.size();
    LOG_WARN(kLog, cfg_.rank, "trying the next controller of the list, " << controllers_[current_].first << ":"
                                  << controllers_[current_].second << (current_ == 0 ? " (the first)" : " (a backup)")
                                  << ", after: " << why);
    return current_ == 0;
}

namespace {

// The next frame on `fd` (through `tls` when the link is TLS) by `deadline`, read in short slices so that
// `stopping` is seen; throws ProtocolError when the peer closes, returns false when the deadline passes first.
bool read_frame(int fd, TlsSession* tls, FrameParser& parser, Frame& out,
                std::chrono::steady_clock::time_point deadline, const std::atomic<bool>& stopping) {
    while (!parser.next(out)) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0 || stopping) return false;
        pollfd p{fd, POLLIN, 0};
        if (!(tls && tls->buffered()) && ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 200))) <= 0) {
            continue;
        }
        char buf[4096];
        if (tls) {
            size_t got = 0;
            std::string error;
            IoStatus s = tls->read(buf, sizeof buf, &got, &error);
            if (s == IoStatus::WouldBlock) continue;
            if (s != IoStatus::Ok) {
                throw ClosedDuringRegistration("connection closed during registration" + (error.empty() ? "" : ": " + error));
            }
            parser.feed(buf, got);
            continue;
        }
        ssize_t got = ::recv(fd, buf, sizeof buf, 0);
        if (got <= 0) {
            if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            throw ClosedDuringRegistration("connection closed during registration");
        }
        parser.feed(buf, static_cast<size_t>(got));
    }
    return true;
}

std::string endpoint_text(const Endpoint& e) { return e.first + ":" + std::to_string(e.second); }

}  // namespace

bool Processor::connect_and_register(std::string* error, bool* fatal, bool* no_majority) {
    *no_majority = false;
    const Endpoint endpoint = controller_now();
    const auto& [host, port] = endpoint;
    int fd;
    try {
        fd = connect_tcp(host, port, cfg_.io_timeout_ms);
        // A lost controller node is noticed on a heartbeat, within this, and the next controller tried.
        set_user_timeout(fd, std::max(cfg_.io_timeout_ms, 3 * static_cast<int>(cfg_.heartbeat_ms)));
    } catch (const NetError& e) {
        *error = e.what();
        std::lock_guard<CountedMutex> lock(mu_);
        if (term_ == 0 || endpoint != leader_ || leader_gone_) return false;
        if (e.code != ECONNREFUSED) {
            link_silent_ = true;  // a timeout or no route proves nothing: a partition looks the same as a dead host
        } else if (!link_silent_) {
            // Its host answered and nothing listens at its address: the controller's process is gone.
            leader_gone_ = true;
            LOG_WARN(kLog, cfg_.rank, "the controller of term " << term_ << " at " << endpoint_text(endpoint)
                                          << " refused a connection: its process is gone (a backup may lead on this proof)");
        } else {
            LOG_WARN(kLog, cfg_.rank, "the controller of term " << term_ << " at " << endpoint_text(endpoint)
                                          << " refused a connection after a silence: no proof (it may have ended after a "
                                             "partition, which others may have seen end differently)");
            leader_gone_ = false;
            link_silent_ = true;
        }
        return false;
    }
    std::unique_ptr<TlsSession> tls;
    if (tls_context_) {
        tls = std::make_unique<TlsSession>(*tls_context_, fd);
        std::string why;
        if (!tls->handshake(cfg_.io_timeout_ms, &why)) {
            *error = "TLS with the controller at " + endpoint_text(endpoint) + ": " + why;
            tls.reset();
            close_fd(fd);
            return false;
        }
    }
    RegisterMsg reg{cfg_.rank, cfg_.world_size, cfg_.heartbeat_ms, cfg_.token, false, static_cast<int32_t>(::getpid())};
    {
        std::lock_guard<CountedMutex> lock(mu_);
        reg.restarted = joining_;
        reg.may_replace = allow_replacement_ && !registered_once_;
        reg.term = term_;
        reg.recovery_action = recovery_action_;
        reg.leader_gone = leader_gone_;
        reg.controllers = static_cast<uint16_t>(std::min<size_t>(controllers_.size(), UINT16_MAX));
    }
    const std::string frame = encode_frame(MsgType::Register, 0, encode(reg));
    if (!(tls ? tls->write_all(frame, cfg_.io_timeout_ms, error) : send_all(fd, frame, cfg_.io_timeout_ms, error))) {
        tls.reset();
        close_fd(fd);
        return false;
    }
    FrameParser parser;
    Frame ack;
    try {
        auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.io_timeout_ms);
        if (!read_frame(fd, tls.get(), parser, ack, deadline, stopping_)) {
            if (endpoint == controller_leader()) link_silent_ = true;
            throw ProtocolError("no registration reply within " + std::to_string(cfg_.io_timeout_ms) + " ms");
        }
        if (ack.type != MsgType::RegisterAck) throw ProtocolError("expected a registration reply");
        auto reply = decode_as<RegisterAckMsg>(ack.body);
        if (reply.result == kAwaitingMajority) {
            ack = await_election(fd, tls.get(), parser, endpoint_text(endpoint), reply.message);
            reply = decode_as<RegisterAckMsg>(ack.body);
        }
        if (reply.result == kNoMajority) {
            *no_majority = true;
            throw ProtocolError("the backup at " + endpoint_text(endpoint) + " does not lead: " + reply.message);
        }
        if (reply.result == kNotTheLeader) throw ProtocolError("the controller is not the job's: " + reply.message);
        if (reply.result != 0) {
            *fatal = true;
            refused_as_job_ends_ = reply.result == kJobEnding;
            throw ProtocolError("the controller refused registration: " + reply.message);
        }
        std::lock_guard<CountedMutex> lock(mu_);
        if (reply.term < term_) {
            // A controller that was replaced came back: only the one that took over may act.
            std::string why = "the controller at " + host + ":" + std::to_string(port) + " has term " +
                              std::to_string(reply.term) + ", older than term " + std::to_string(term_) +
                              " this rank registered under: it was replaced, and is refused";
            LOG_WARN(kLog, cfg_.rank, why);
            throw ProtocolError(why);
        }
        // A takeover: the new controller never heard the report of a fault still being handled.
        if (term_ > 0 && reply.term > term_ && open_report_ && !unsent_error_) {
            unsent_error_ = open_report_;
            LOG_WARN(kLog, cfg_.rank, "the controller of term " << reply.term << " took over from term " << term_
                                          << " while this rank's fault (state " << int(open_report_->state)
                                          << ") was being handled: reporting it again");
        }
        term_ = reply.term;
        leader_ = endpoint;
        leader_gone_ = false;
        link_silent_ = false;
        registered_once_ = true;
        if (reply.replacement) {
            joining_ = true;  // a reconnect before the repair completes registers as the replacement again
            accepted_as_replacement_ = true;
        }
    } catch (const ProtocolError& e) {
        *error = e.what();
        tls.reset();
        close_fd(fd);
        if (dynamic_cast<const ClosedDuringRegistration*>(&e)) recheck_dying_leader(endpoint);
        return false;
    }
    {
        std::lock_guard<CountedMutex> lock(send_mu_);
        close_link_locked();
        fd_ = fd;
        tls_ = std::move(tls);
    }
    std::optional<ReplicaInfoMsg> replica;
    std::optional<ErrorReportMsg> unsent;
    {
        std::lock_guard<CountedMutex> lock(mu_);
        replica = replica_;
        unsent = unsent_error_;
        unsent_error_.reset();
        ++stats_["registrations"];
    }
    if (replica) send_raw(encode_frame(MsgType::ReplicaInfo, 0, encode(*replica)));
    // The report before the status: a controller that took over plans once it has every rank's status.
    if (unsent) send_raw(encode_frame(MsgType::ErrorReport, 0, encode(*unsent)));
    send_status(MsgType::Status);
    LOG_INFO(kLog, cfg_.rank, "registered with the controller at " << host << ":" << port << " (term " << term_ << ")");
    return true;
}

// The retry of a lost controller's address comes at once, and a process being killed can still accept it
// while its sockets are torn down, then close it unanswered. A moment later that address refuses: the proof
// a backup may lead on, without which it would hold this rank for a majority (MINDIO_TAKEOVER_WAIT_S).
void Processor::recheck_dying_leader(const Endpoint& endpoint) {
    {
        std::lock_guard<CountedMutex> lock(mu_);
        if (term_ == 0 || endpoint != leader_ || leader_gone_ || link_silent_) return;
    }
    std::this_thread::sleep_for(kDyingLeaderPause);
    try {
        int probe = connect_tcp(endpoint.first, endpoint.second, cfg_.io_timeout_ms);
        close_fd(probe);
    } catch (const NetError& e) {
        std::lock_guard<CountedMutex> lock(mu_);
        if (e.code != ECONNREFUSED || endpoint != leader_ || leader_gone_ || link_silent_) return;
        leader_gone_ = true;
        LOG_WARN(kLog, cfg_.rank, "the controller of term " << term_ << " at " << endpoint_text(endpoint)
                                      << " closed a registration unanswered, then refused a connection: its process is "
                                         "gone (a backup may lead on this proof)");
    }
}

// A backup that may not lead yet (no majority, no proof) holds the registration open and answers again
// when a majority has come (accepted) or its wait is over (kNoMajority). Bounded by the backup's wait
// (MINDIO_TAKEOVER_WAIT_S) and the I/O timeout; no answer by then counts as no majority.
Frame Processor::await_election(int fd, TlsSession* tls, FrameParser& parser, const std::string& where,
                                const std::string& why) {
    const int wait_ms = cfg_.majority_wait_ms + cfg_.io_timeout_ms;
    LOG_WARN(kLog, cfg_.rank, "the backup at " << where << " does not lead yet: " << why << "; waiting up to " << wait_ms
                                               << " ms for a majority of the ranks to register with it");
    Frame verdict;
    if (!read_frame(fd, tls, parser, verdict, Clock::now() + std::chrono::milliseconds(wait_ms), stopping_)) {
        if (stopping_) throw ProtocolError("stopped while the backup at " + where + " waited for a majority");
        RegisterAckMsg none{kNoMajority, "no answer within " + std::to_string(wait_ms) + " ms while it waited for a majority"};
        return Frame{MsgType::RegisterAck, 0, encode(none)};
    }
    if (verdict.type != MsgType::RegisterAck) throw ProtocolError("expected the backup's second registration reply");
    return verdict;
}

bool Processor::send_frame(const std::string& frame) {
    send_deferred_status();
    return send_raw(frame);
}

bool Processor::send_status(MsgType type) {
    status_due_ns_.store(0);  // the frame carries every change made so far
    return send_raw(status_frame(type));
}

void Processor::send_deferred_status() {
    if (status_due_ns_.exchange(0) != 0 && send_raw(status_frame(MsgType::Status))) {
        deferred_frames_.fetch_add(1, std::memory_order_relaxed);
    }
}

// Only the step's section waits: the controller judges a fault by where the faulted rank was (a rank that died
// inside a save leaves the others' save nothing to wait for), and a rank killed 10 ms into a save must be known to
// have been in it. Between two steps a rank is in the step's section or none, which no judgement tells apart.
void Processor::report_section_change(Section section) {
    if (section == Section::Step) {
        defer_status();
    } else {
        send_status(MsgType::Status);
    }
}

void Processor::defer_status() {
    int64_t none = 0;
    const int64_t due = steady_ns() + kDeferredStatusMs * 1000000;
    if (status_due_ns_.compare_exchange_strong(none, due) && wake_fd_ >= 0) {
        uint64_t one = 1;
        (void)!::write(wake_fd_, &one, sizeof one);
    }
}

bool Processor::send_raw(const std::string& frame) {
    std::lock_guard<CountedMutex> lock(send_mu_);
    if (fd_ < 0) return false;
    std::string error;
    int code = 0;
    if (tls_ ? tls_->write_all(frame, cfg_.io_timeout_ms, &error, &code)
             : send_all(fd_, frame, cfg_.io_timeout_ms, &error, &code)) {
        frames_sent_.fetch_add(1, std::memory_order_relaxed);
        bytes_sent_.fetch_add(frame.size(), std::memory_order_relaxed);
        return true;
    }
    if (code != EPIPE && code != ECONNRESET) link_silent_ = true;  // not the peer's host resetting it
    LOG_WARN(kLog, cfg_.rank, "send to the controller failed: " << error);
    ::shutdown(fd_, SHUT_RDWR);  // the network thread notices and reconnects
    return false;
}

std::string Processor::status_frame(MsgType type) const {
    std::lock_guard<CountedMutex> lock(mu_);
    RankStatusMsg m{cfg_.rank, step_, run_, data_, ckpt_step_, section_, 0, section_limit_ms_, progress_.load(),
                    compute_ms_};
    if (section_ != Section::None) {
        m.section_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - section_started_).count();
    }
    return encode_frame(type, 0, encode(m));
}

void Processor::drop_connection(const std::string& why) {
    LOG_WARN(kLog, cfg_.rank, "lost the controller connection: " << why);
    std::lock_guard<CountedMutex> lock(send_mu_);
    close_link_locked();
}

void Processor::net_loop() {
    FrameParser parser;
    auto next_beat = Clock::now();
    int attempt = 0;
    // After a backup's "no majority": the attempts left of one more round of the list (-1: no such answer
    // since the last registration), and that answer.
    int round_left = -1;
    std::string minority;
    while (running_) {
        int fd;
        {
            std::lock_guard<CountedMutex> lock(send_mu_);
            fd = fd_;
        }
        if (fd < 0) {
            if (told_to_exit()) {
                LOG_INFO(kLog, cfg_.rank, "the controller told this process to exit: not reconnecting");
                return;
            }
            std::string error;
            bool fatal = false, no_majority = false;
            if (connect_and_register(&error, &fatal, &no_majority)) {
                attempt = 0;
                round_left = -1;
                parser = FrameParser();
                last_beat_ = {};  // the time spent reconnecting is no late beat
                continue;
            }
            const int listed = static_cast<int>(controllers_.size());
            if (round_left > 0) --round_left;
            if (no_majority && round_left < 0) round_left = listed;
            if (no_majority) minority = error;
            const bool exhausted = fatal || ++attempt >= cfg_.retry_times * listed;
            if (round_left == 0 || (exhausted && round_left > 0)) return leave_as_minority(minority);
            if (exhausted) {
                LOG_ERROR(kLog, cfg_.rank, "giving up on the controller after " << attempt << " attempts: " << error
                                                   << "; training goes on unsupervised, and a fault from now on ends this "
                                                      "rank with no recovery and no dying-gasp checkpoint");
                std::lock_guard<CountedMutex> lock(mu_);
                lost_ = true;
                cv_.notify_all();
                return;
            }
            if (!try_next_controller(error)) continue;  // one back-off per round of the list
            std::unique_lock<CountedMutex> lock(mu_);
            cv_.wait_for(lock, std::chrono::milliseconds(backoff_ms((attempt - 1) / static_cast<int>(controllers_.size()),
                                                                    cfg_.backoff_base_ms)),
                         [&] { return !running_; });
            continue;
        }
        auto now = Clock::now();
        if (now >= next_beat) {
            note_late_beat(now);
            send_status(MsgType::Heartbeat);
            next_beat = now + std::chrono::milliseconds(cfg_.heartbeat_ms);
            watch_handler();
        }
        int64_t due = status_due_ns_.load();
        if (due != 0 && steady_ns() >= due) {
            send_deferred_status();
            due = 0;
        }
        int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - now).count());
        if (due != 0) wait_ms = std::min<int>(wait_ms, static_cast<int>((due - steady_ns()) / 1000000) + 1);
        if (!tls_buffered(fd)) {
            pollfd polled[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
            int ready = ::poll(polled, wake_fd_ >= 0 ? 2 : 1, std::clamp(wait_ms, 1, 100));
            if (ready > 0 && (polled[1].revents & POLLIN)) {
                uint64_t wakes = 0;
                (void)!::read(wake_fd_, &wakes, sizeof wakes);
            }
            if (ready <= 0 || polled[0].revents == 0) continue;
        }
        char buf[65536];
        std::string why;
        ssize_t got = receive(fd, buf, sizeof buf, &why);
        if (got <= 0) {
            if (got < 0 && why.empty()) continue;  // nothing yet
            // A close (FIN), a reset (RST) or a TLS error is the controller's host answering; anything else
            // (ETIMEDOUT after TCP_USER_TIMEOUT, no route to the host) is a silence.
            if (got < 0 && why != std::strerror(ECONNRESET) && why.rfind("TLS", 0) != 0) link_silent_ = true;
            drop_connection(got == 0 ? "closed by the controller" : why);
            continue;
        }
        parser.feed(buf, static_cast<size_t>(got));
        try {
            Frame frame;
            while (parser.next(frame)) {
                if (!on_frame(frame)) return;  // the controller closed on purpose
            }
        } catch (const ProtocolError& e) {
            drop_connection(std::string("malformed frame from the controller: ") + e.what());
        }
    }
}

// The ranks that reached a backup were a minority, and one more round of the list found no controller that
// takes this rank: the leader (if it lives) leads the others and will replace this rank. It must not go
// on training beside them: cut off, it takes no step (start_updating throws) and the process leaves the
// job (core/detection/cut_off.py).
void Processor::leave_as_minority(const std::string& why) {
    std::string reason = "lost the controller of term " + std::to_string(controller_term()) +
                         " with no proof that its process is gone, and the ranks that reached a backup are a "
                         "minority (" + why + "); one more round of the controller list found no leader";
    LOG_ERROR(kLog, cfg_.rank, "cut off from the job: " << reason
                                   << "; this rank leaves the job (no checkpoint, no further training step)");
    std::lock_guard<CountedMutex> lock(mu_);
    cut_off_ = reason;
    lost_ = true;
    cv_.notify_all();
}

std::string Processor::cut_off() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return cut_off_;
}

std::optional<std::string> Processor::wait_cut_off(int timeout_ms) {
    std::unique_lock<CountedMutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(std::max(timeout_ms, 0)),
                 [&] { return !cut_off_.empty() || stopping_.load(); });
    if (cut_off_.empty() && stopping_) return std::nullopt;
    return cut_off_;
}

// Returns false after the controller's goodbye: the net loop ends, with no reconnecting.
bool Processor::on_frame(const Frame& frame) {
    if (frame.type == MsgType::Action) {
        on_action(frame.seq, frame.body);
        return true;
    }
    if (frame.type != MsgType::Goodbye) throw ProtocolError("unexpected message type " + std::to_string(int(frame.type)));
    auto bye = decode_as<GoodbyeMsg>(frame.body);
    LOG_INFO(kLog, cfg_.rank, "the controller closed: " << bye.reason);
    {
        std::lock_guard<CountedMutex> lock(send_mu_);
        close_link_locked();
    }
    std::lock_guard<CountedMutex> lock(mu_);
    closed_by_controller_ = bye.reason.empty() ? "closed" : bye.reason;
    lost_ = true;
    cv_.notify_all();
    return false;
}

std::string Processor::controller_closed() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return closed_by_controller_;
}

bool Processor::connected() const {
    {
        std::lock_guard<CountedMutex> lock(mu_);
        if (lost_) return false;
    }
    std::lock_guard<CountedMutex> lock(send_mu_);
    return fd_ >= 0;
}

void Processor::on_action(uint64_t seq, const std::string& body) {
    ActionMsg msg = decode_as<ActionMsg>(body);
    std::string cached;
    {
        std::lock_guard<CountedMutex> lock(mu_);
        if (seq < last_seq_) {
            ++stats_["stale_dropped"];
            LOG_DEBUG(kLog, cfg_.rank, "dropped stale action sn " << seq << " (last " << last_seq_ << ")");
            return;
        }
        if (seq == last_seq_) {
            ++stats_["duplicates"];
            cached = cached_reply_;  // empty while the action still runs: its reply will follow
        } else {
            last_seq_ = seq;
            cached_reply_.clear();
            queue_.push_back({seq, std::move(msg)});
            cv_.notify_all();
            return;
        }
    }
    if (!cached.empty()) send_frame(cached);
}

// The net thread needs no GIL and runs no callback, so a late beat means this process did not run
// (stopped, starved of CPU, swapping) or a send blocked: logged with the numbers, so that a suspect the
// controller reports can be matched with its cause here.
void Processor::note_late_beat(Clock::time_point now) {
    if (last_beat_ != Clock::time_point{}) {
        auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_beat_).count();
        if (gap > 2 * static_cast<int64_t>(cfg_.heartbeat_ms)) {
            {
                std::lock_guard<CountedMutex> lock(mu_);
                ++stats_["late_heartbeats"];
            }
            LOG_WARN(kLog, cfg_.rank, "heartbeat sent " << gap << " ms after the previous one (period " << cfg_.heartbeat_ms
                                                        << " ms): the heartbeat thread did not run or a send blocked");
        }
    }
    last_beat_ = now;
}

void Processor::watch_handler() {
    std::lock_guard<CountedMutex> lock(mu_);
    if (!running_action_ || warned_slow_) return;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - running_action_->second).count();
    if (ms > cfg_.handler_limit_ms) {
        warned_slow_ = true;
        LOG_ERROR(kLog, cfg_.rank, "handler for action " << action_name(running_action_->first) << " has run " << ms
                                                         << " ms, beyond its limit of " << cfg_.handler_limit_ms << " ms");
    }
}

void Processor::worker_loop() {
    while (true) {
        Queued job;
        Dispatcher dispatch;
        {
            std::unique_lock<CountedMutex> lock(mu_);
            cv_.wait(lock, [&] { return !running_ || !queue_.empty(); });
            if (!running_) return;
            job = std::move(queue_.front());
            queue_.pop_front();
            if (job.msg.step >= 0 && job.msg.kind != ActionKind::Pause) repair_step_ = job.msg.step;
            if (job.msg.strategy != Strategy::None) repair_type_ = job.msg.strategy;
            if (job.msg.kind == ActionKind::Stop) run_ = RunStatus::Stopped;
            if (job.msg.kind == ActionKind::Prelock) prelock_step_ = std::max<int64_t>(job.msg.step, 0);
            cv_.notify_all();  // a start_updating blocked by the prelock waits for STOP
            // Whatever comes after PAUSE ends it: CONTINUE, or a recovery's first action. Cleared here, never
            // set back by a later action, so a held rank that wakes late still sees it (PRELOCK then EXIT
            // may both be taken before it wakes).
            paused_ = job.msg.kind == ActionKind::Pause;
            pause_step_ = paused_ ? job.msg.step : -1;
            if (job.msg.kind != ActionKind::Normal && job.msg.kind != ActionKind::Exit &&
                job.msg.kind != ActionKind::Pause && job.msg.kind != ActionKind::Continue) {
                recovery_action_ = static_cast<uint16_t>(job.msg.kind);
            }
            running_action_ = std::make_pair(job.msg.kind, Clock::now());
            warned_slow_ = false;
            dispatch = dispatcher_;
        }
        std::pair<int, std::string> result{0, ""};
        if (dispatch) {
            try {
                result = dispatch(job.msg);
            } catch (const std::exception& e) {
                result = {1, "rank " + std::to_string(cfg_.rank) + " action " + action_name(job.msg.kind) + ": " + e.what()};
            }
        } else if (job.msg.kind != ActionKind::Normal && job.msg.kind != ActionKind::Exit &&
                   job.msg.kind != ActionKind::Pause && job.msg.kind != ActionKind::Continue &&
                   job.msg.kind != ActionKind::Prelock) {
            result = {1, "rank " + std::to_string(cfg_.rank) + " action " + action_name(job.msg.kind) +
                             ": no handler dispatcher is registered"};
        }
        if (result.first != 0 && !(job.msg.kind == ActionKind::Clean && result.first == kCleanNeedsNoRebuild) &&
            !(job.msg.kind == ActionKind::RebuildGroup && result.first == kLeavesTheJob)) {
            LOG_ERROR(kLog, cfg_.rank, "action " << action_name(job.msg.kind) << " failed: " << result.second);
        }
        std::string reply = encode_frame(MsgType::ActionReply, job.seq,
                                         encode(ActionReplyMsg{cfg_.rank, job.msg.kind, result.first, result.second}));
        {
            std::lock_guard<CountedMutex> lock(mu_);
            running_action_.reset();
            ++stats_[std::string("executed_") + action_name(job.msg.kind)];
            if (job.seq == last_seq_) cached_reply_ = reply;
            if (job.msg.kind == ActionKind::Normal) next_action_ = NextAction::Retry, run_ = RunStatus::Running, joining_ = false;
            if (job.msg.kind == ActionKind::Exit) {
                next_action_ = NextAction::Exit, told_to_exit_ = true;
                exit_ranks_ = job.msg.error_ranks;
            }
            if (job.msg.kind == ActionKind::Normal || job.msg.kind == ActionKind::Exit) {
                prelock_step_ = -1;
                recovery_action_ = 0;
                open_report_.reset();
            }
            cv_.notify_all();
        }
        send_frame(reply);
    }
}

void Processor::set_replica(const ReplicaInfoMsg& info) {
    std::string frame = encode_frame(MsgType::ReplicaInfo, 0, encode(info));  // refuses a bad layout here, once
    {
        std::lock_guard<CountedMutex> lock(mu_);
        replica_ = info;
    }
    send_frame(frame);
}

bool Processor::pause_due_locked() const {
    return paused_ && pause_step_ >= 0 && step_ >= pause_step_ && prelock_step_ < 0 && run_ != RunStatus::Stopped;
}

// Holds this rank before its next update while the pause is due; the controller sees it hold (run status
// Paused). Released by CONTINUE, by a recovery (PRELOCK, STOP), by a controller of another term (the pause
// was the old one's), by the end of the link, or at `limit`. The time held is no time in the rank's
// section: the hang rule judges the step, not the pause. Returns false when released only by the limit.
bool Processor::hold_while_paused(std::unique_lock<CountedMutex>& lock, std::chrono::milliseconds limit) {
    if (!pause_due_locked()) return true;
    const uint64_t term = term_;
    const int64_t step = step_;
    const auto since = Clock::now();
    if (holders_++ == 0) run_ = RunStatus::Paused, hold_started_ = since;
    lock.unlock();
    send_status(MsgType::Status);
    LOG_INFO(kLog, cfg_.rank, "paused after step " << step << ": holding before the next update");
    lock.lock();
    bool released = cv_.wait_for(lock, limit, [&] { return !pause_due_locked() || term_ != term || !running_ || lost_; });
    if (!released && limit >= kPauseHoldCap) {
        LOG_WARN(kLog, cfg_.rank, "still paused after " << kPauseHoldCap.count() / 1000 << " s, longer than any "
                                      "controller holds a pause: this rank goes on by itself");
        paused_ = false, pause_step_ = -1;
        released = true;
    }
    if (--holders_ == 0) {
        if (run_ == RunStatus::Paused) run_ = RunStatus::Running;
        section_started_ += Clock::now() - hold_started_;
    }
    ++stats_["pause_holds"];
    lock.unlock();
    send_status(MsgType::Status);
    const auto held_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
    LOG_INFO(kLog, cfg_.rank, "held for " << held_ms << " ms after step " << step << (released ? "; training goes on" : ""));
    lock.lock();
    return released;
}

bool Processor::hold_if_paused(int timeout_ms) {
    std::unique_lock<CountedMutex> lock(mu_);
    auto limit = timeout_ms < 0 ? kPauseHoldCap : std::min(kPauseHoldCap, std::chrono::milliseconds(timeout_ms));
    return hold_while_paused(lock, limit);
}

void Processor::start_updating(int64_t) {
    {
        std::unique_lock<CountedMutex> lock(mu_);
        updating_compute_ms_ = step_compute_ms_locked();  // its gradients are synced: the compute is over
        hold_while_paused(lock, kPauseHoldCap);
        if (!cut_off_.empty()) {
            throw std::runtime_error("rank " + std::to_string(cfg_.rank) + " is cut off from the job and may not start "
                                     "an optimizer update: " + cut_off_);
        }
        if (prelock_step_ >= 0) {
            int64_t locked = prelock_step_;
            auto waited_from = Clock::now();
            // Nobody starts an update after the lock: wait for the STOP (bounded), unless the lock is
            // for a step this rank already completed, when there is nothing to wait for.
            bool stopped = step_ >= locked ||
                           cv_.wait_for(lock, std::chrono::milliseconds(cfg_.prelock_wait_ms), [&] {
                               return run_ == RunStatus::Stopped || prelock_step_ < 0 || !running_ || lost_;
                           });
            if (prelock_step_ >= 0 || !stopped) {
                auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - waited_from).count();
                ++stats_["prelock_force_stops"];
                throw std::runtime_error(
                    "FORCE STOP: rank " + std::to_string(cfg_.rank) + " may not start an optimizer update after the "
                    "controller's prelock at step " + std::to_string(locked) + " (last completed step " +
                    std::to_string(step_) + ", " +
                    (step_ >= locked ? std::string("already at the lock step")
                                     : run_ == RunStatus::Stopped ? "stopped after " + std::to_string(ms) + " ms"
                                                                  : "no STOP within " + std::to_string(ms) + " ms") +
                    ")");
            }
        }
        data_ = DataStatus::Updating;
    }
    send_status(MsgType::Status);
}

void Processor::end_updating(int64_t step) {
    {
        std::lock_guard<CountedMutex> lock(mu_);
        data_ = DataStatus::Updated;
        step_ = step;
        compute_ms_ = updating_compute_ms_;
    }
    send_status(MsgType::Status);
}

void Processor::start_copy() {
    {
        std::lock_guard<CountedMutex> lock(mu_);
        data_ = DataStatus::Copying;
    }
    send_status(MsgType::Status);
}

void Processor::report_ckpt_step(int64_t step) {
    if (step < 0) throw std::invalid_argument("step " + std::to_string(step) + " is negative");
    {
        std::lock_guard<CountedMutex> lock(mu_);
        ckpt_step_ = step;
    }
    send_status(MsgType::Status);
}

void Processor::report_loaded_step(int64_t step) {
    if (step < 0) throw std::invalid_argument("step " + std::to_string(step) + " is negative");
    {
        std::lock_guard<CountedMutex> lock(mu_);
        data_ = DataStatus::Updated;
        step_ = step;
    }
    send_status(MsgType::Status);
}

void Processor::begin_section(Section section, int64_t limit_ms) {
    if (section == Section::None) throw std::invalid_argument("begin_section: no section given");
    if (limit_ms < 0) throw std::invalid_argument("begin_section: negative limit " + std::to_string(limit_ms) + " ms");
    {
        std::lock_guard<CountedMutex> lock(mu_);
        section_ = section;
        section_started_ = Clock::now();
        section_limit_ms_ = limit_ms;
        progress_ = 0;
    }
    report_section_change(section);
}

void Processor::end_section() {
    Section ended;
    {
        std::lock_guard<CountedMutex> lock(mu_);
        if (section_ == Section::None) return;
        ended = section_;
        section_ = Section::None;
        section_limit_ms_ = 0;
        progress_ = 0;
    }
    report_section_change(ended);
}

void Processor::add_progress(uint64_t units) {
    progress_.fetch_add(units);
    last_progress_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// The step's compute so far: from its section's start to its last forward or backward (-1: not in a step).
int64_t Processor::step_compute_ms_locked() const {
    if (section_ != Section::Step || progress_.load() == 0) return -1;
    const auto last = Clock::time_point(std::chrono::nanoseconds(last_progress_ns_.load()));
    return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(last - section_started_).count());
}

void Processor::finish() {
    {
        std::lock_guard<CountedMutex> lock(mu_);
        run_ = RunStatus::Finished;
        section_ = Section::None;
        section_limit_ms_ = 0;
    }
    send_status(MsgType::Status);
}

void Processor::report_error(uint8_t report_state, const std::string& error_code) {
    // Refused here, in the caller's thread, so the training code learns of a bad code at once
    // instead of the controller dropping the connection over it.
    std::string problem = check_error_code(error_code);
    if (!problem.empty()) throw std::invalid_argument("error_code " + problem);
    if (report_state > kMaxReportState) {
        throw std::invalid_argument("report_state " + std::to_string(report_state) + " is out of range 0.." +
                                    std::to_string(kMaxReportState));
    }
    const bool sub_health = report_state == static_cast<uint8_t>(ReportState::SubHealth);
    ErrorReportMsg msg{cfg_.rank, report_state, error_code};
    {
        std::lock_guard<CountedMutex> lock(mu_);
        // NORMAL (stopped on purpose) and the progress reports (INIT_FINISH, PREREPAIR_FINISH,
        // STEP_FINISH) are not faults.
        // SUB_HEALTH (ours) is not a fault either: training goes on.
        if (report_state != 0 && (report_state < 5 || report_state > 7) && !sub_health) run_ = RunStatus::Faulted;
        if (report_state != 0 && report_state != 5 && report_state != 7 && !sub_health) open_report_ = msg;
    }
    if (!send_frame(encode_frame(MsgType::ErrorReport, 0, encode(msg)))) {
        std::lock_guard<CountedMutex> lock(mu_);
        unsent_error_ = msg;  // sent as soon as the connection is back
    }
}

NextAction Processor::wait_next_action(int timeout_ms) {
    std::unique_lock<CountedMutex> lock(mu_);
    bool ready = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                              [&] { return next_action_.has_value() || lost_ || !running_; });
    if (!ready) return NextAction::Timeout;
    if (!next_action_) return NextAction::ControllerLost;
    NextAction next = *next_action_;
    next_action_.reset();
    return next;
}

int64_t Processor::prelock_step() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return prelock_step_;
}

int64_t Processor::repair_step() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return repair_step_;
}

uint64_t Processor::controller_term() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return term_;
}

Strategy Processor::repair_type() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return repair_type_;
}

std::vector<int32_t> Processor::exit_ranks() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return exit_ranks_;
}

bool Processor::paused() const {
    std::lock_guard<CountedMutex> lock(mu_);
    return paused_;
}

std::map<std::string, uint64_t> Processor::stats() const {
    std::map<std::string, uint64_t> stats;
    {
        std::lock_guard<CountedMutex> lock(mu_);
        stats = stats_;
    }
    stats["frames_sent"] = frames_sent_.load();
    stats["frames_deferred"] = deferred_frames_.load();
    stats["bytes_sent"] = bytes_sent_.load();
    stats["locks_taken"] = mu_.taken() + send_mu_.taken();
    return stats;
}

}  // namespace mindio
