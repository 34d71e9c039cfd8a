#include "controller/controller.h"

#include <algorithm>

#include "common/log.h"
#include "common/thread_name.h"
#include "controller/controller_timing.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";
constexpr int kGoodbyeDrainMs = 1000;  // longest the goodbyes may take to go out at shutdown

constexpr int kMaxWorldSize = 1 << 20;  // a rank table entry each: a typo must not allocate gigabytes

int valid_world_size(int world_size) {
    if (world_size < 1 || world_size > kMaxWorldSize) {
        throw std::invalid_argument("world_size must be in 1.." + std::to_string(kMaxWorldSize) + ", got " +
                                    std::to_string(world_size));
    }
    return world_size;
}

// Every rank of the job may connect at once before any registers; beyond that a margin for launchers'
// reports and reconnects. The rest are closed at accept (net/server.h).
size_t max_unauthenticated(int world_size) { return static_cast<size_t>(std::max(world_size, 1)) + 1024; }

}  // namespace

Controller::Controller(ControllerConfig config)
    : cfg_(std::move(config)),
      inbox_(*this, server_, mu_, ranks_, cfg_.token, cfg_.world_size, cfg_.rank),
      server_(inbox_, cfg_.register_timeout_ms, cfg_.frame_timeout_ms, max_unauthenticated(cfg_.world_size)),
      ranks_(valid_world_size(cfg_.world_size), cfg_.caps.recover,
             LivenessRules{cfg_.heartbeat_misses, cfg_.silence_limit_ms}, cfg_.caps.elastic),
      actions_(server_, mu_, cv_, ranks_, engine_hooks(), cfg_.rank, cfg_.action_timeout_ms),
      slow_(cfg_.slow) {
    if (cfg_.token.empty()) {
        LOG_WARN(kLog, cfg_.rank, "MINDIO_TOKEN is not set: any client that reaches the port can register");
    }
}

Controller::~Controller() { stop(); }

ActionEngine::Hooks Controller::engine_hooks() {
    return {[this](const std::string& kind, const std::string& detail) { event_locked(kind, detail); },
            [this](bool interruptible) { return stopping_ || (interruptible && intake_.second_fault()); },
            [this] { detect_dead_locked(); }};
}

int Controller::start(const std::string& host, int port) {
    server_.set_tls(make_tls_context(cfg_.tls, true));
    int bound = server_.start(host, port);
    thread_ = std::thread([this] {
        name_this_thread("mindio-ctl");
        run();
    });
    LOG_INFO(kLog, cfg_.rank, "listening on " << host << ":" << bound << " for " << cfg_.world_size << " ranks");
    return bound;
}

void Controller::stop() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        stopping_ = true;
        if (state_ != State::Final) transition_locked(State::Final, "controller destroyed");
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    say_goodbye();
    server_.stop();
}

// Tells every connected processor that the controller closes on purpose, so that it logs a closed
// controller rather than a lost one and stops reconnecting; bounded, the processors may be gone.
void Controller::say_goodbye() {
    std::vector<uint64_t> conns;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& r : ranks_) {
            if (r.connected) conns.push_back(r.conn);
        }
    }
    std::string bye = encode_frame(MsgType::Goodbye, 0, encode(GoodbyeMsg{cfg_.rank, "controller destroyed"}));
    server_.send({Server::Outgoing{conns, bye}});
    for (uint64_t conn : conns) server_.close(conn, "controller destroyed");
    server_.drain(kGoodbyeDrainMs);
}

State Controller::state() const {
    std::lock_guard<std::mutex> lock(mu_);
    return state_;
}

std::vector<ControllerEvent> Controller::events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.all();
}

size_t Controller::event_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.all().size();
}

int64_t Controller::repair_step() const {
    std::lock_guard<std::mutex> lock(mu_);
    return repair_step_;
}

uint64_t Controller::term() const {
    std::lock_guard<std::mutex> lock(mu_);
    return leadership_.term();
}

std::vector<ReplicaSetInfo> Controller::layout() const {
    std::lock_guard<std::mutex> lock(mu_);
    return replicas_.sets();
}

std::vector<Controller::RankView> Controller::ranks() const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    std::vector<RankView> out;
    for (const auto& r : ranks_) {
        RankView v{r.step, r.data, {}};
        const std::pair<bool, const char*> flags[] = {{r.registered, "registered"}, {r.connected, "connected"},
                                                      {r.suspect, "suspect"}, {r.dead, "dead"},
                                                      {r.joining, "joining"}, {r.left, "left"},
                                                      {r.finished, "finished"},
                                                      {r.run == RunStatus::Paused, "paused"},
                                                      {slow_.slow(static_cast<int>(out.size())), "slow"},
                                                      {!r.sub_health.empty(), "sub-healthy"}};
        for (const auto& [on, name] : flags) {
            if (on) v.flags.push_back(name);
        }
        if (r.registered && r.connected) {
            v.silent_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - r.last_seen).count();
        }
        v.heartbeat_ms = r.registered ? r.heartbeat_ms : 0;
        v.domain = r.domain;
        out.push_back(std::move(v));
    }
    return out;
}

std::map<std::string, uint64_t> Controller::stats() const {
    Server::Stats s = server_.stats();
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t registered = 0, dead = 0, left = 0;
    for (const auto& r : ranks_) {
        registered += r.registered;
        dead += r.dead;
        left += r.left;
    }
    return {{"accepted", s.accepted},     {"rejected_frames", s.rejected}, {"frames", s.frames},
            {"registered", registered},  {"dead", dead},                  {"left", left},
            {"refused_registrations", inbox_.refused_registrations()},    {"heartbeats", inbox_.heartbeats()},
            {"refused_unauthenticated", inbox_.refused_unproven_locked()},
            {"closed_over_cap", s.over_cap}, {"accept_pauses", s.accept_pauses}};
}

// ---- state-machine thread ----------------------------------------------------------------------

void Controller::event_locked(const std::string& kind, const std::string& detail) { events_.note(kind, detail); }

void Controller::transition_locked(State to, const std::string& why) {
    if (state_ == to) return;
    if (!transition_allowed(state_, to)) {
        LOG_ERROR(kLog, cfg_.rank, "illegal transition " << state_name(state_) << " -> " << state_name(to) << " (" << why << ")");
        throw std::logic_error(std::string("illegal controller transition ") + state_name(state_) + " -> " + state_name(to));
    }
    LOG_INFO(kLog, cfg_.rank, "state " << state_name(state_) << " -> " << state_name(to) << ": " << why);
    event_locked("state", std::string(state_name(state_)) + "->" + state_name(to));
    state_ = to;
    observe_goodput_locked();
    cv_.notify_all();
}

void Controller::transition(State to, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    transition_locked(to, why);
}

void Controller::run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
        cv_.wait_for(lock, kTick);
        if (stopping_) break;
        observe_goodput_locked();
        judge_slow_ranks_locked();
        std::string refused = inbox_.refusal_summary_due_locked(Clock::now());
        if (!refused.empty()) LOG_WARN(kLog, cfg_.rank, refused);
        if (!leadership_.may_lead()) continue;  // another controller leads the job, or may
        expire_candidates_locked();
        detect_dead_locked();
        judge_liveness_locked();
        if (takeover_open_locked()) continue;
        if (state_ == State::Init && ranks_.all_registered()) {
            transition_locked(State::Normal, "all " + std::to_string(cfg_.world_size) + " ranks registered");
        }
        expire_pause_locked();
        bool idle = state_ == State::Init || state_ == State::Normal || state_ == State::Pause;
        if (!idle) continue;
        try {
            if (leadership_.takeover_dump_due()) {
                dump_after_takeover(lock);
            } else if (intake_.has_pending()) {
                if (!lease_allows_acting_locked()) continue;
                lock.unlock();
                handle_fault();
            } else if (requests_.dump) {
                requests_.dump = false;
                intake_.begin_flow();
                FaultContext ctx = assess_locked({});
                lock.unlock();
                flows_.run(flow_for(Strategy::Dump), ctx, "requested by the cluster manager");
            } else if (requests_.hot_switch && state_ == State::Normal) {
                lock.unlock();
                hot_switch_flow();
            } else if ((requests_.pause && state_ == State::Normal) || (requests_.resume && state_ == State::Pause)) {
                lock.unlock();
                pause_flow();
            } else if (scale_out_due_locked()) {
                lock.unlock();
                scale_out();
            } else {
                continue;
            }
        } catch (const std::exception& e) {
            LOG_ERROR(kLog, cfg_.rank, "recovery flow aborted: " << e.what());
            if (!lock.owns_lock()) lock.lock();
            event_locked("error", e.what());
        }
        if (!lock.owns_lock()) lock.lock();
        actions_.release_prelock_locked();  // a flow that ended before its first action still locks
        elastic_.abort_relayout();          // a flow aborted in its REBUILD_GROUP
        intake_.end_flow();
    }
}

}  // namespace mindio
