// The processor client: one per training process. A network thread registers with the controller,
// sends heartbeats and receives actions; a worker thread runs them through the dispatcher (the Python
// handlers, which take the GIL only while they run), so heartbeats keep flowing during a long handler.
// Actions are idempotent by sequence number: a lower one is dropped, a repeated one is answered from
// the cache of the last reply, a higher one is executed.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/counted_mutex.h"
#include "net/tls.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace mindio {

struct ProcessorConfig {
    int rank = 0;
    int world_size = 1;
    uint32_t heartbeat_ms = 2000;
    int retry_times = 10;          // TTP_RETRY_TIMES: connection attempts before giving up
    int backoff_base_ms = 1000;    // attempts wait 1, 2, 4, 8, 10, 10, ... times this
    int io_timeout_ms = 5000;      // connect, register, and each send
    int handler_limit_ms = 180000; // a handler running longer is reported (the controller acts on it)
    int prelock_wait_ms = 270000;  // longest a start_updating after PRELOCK waits for the STOP
    bool restarted = false;        // started again for a dead rank (ARF): registers as a replacement
    // MINDIO_TAKEOVER_WAIT_S: how long an idle backup may hold this rank's registration while it waits
    // for a majority (its answer is awaited this long plus io_timeout_ms).
    int majority_wait_ms = 10000;
    std::string token;
    TlsFiles tls;  // MINDIO_TLS_*: the link is TLS when set
};

enum class NextAction : int { Retry = 0, Exit = 1, Timeout = -1, ControllerLost = -2 };

using Endpoint = std::pair<std::string, int>;  // a controller's host and port

// The controller refused this rank's registration because it is ending the job (RegisterAck kJobEnding).
struct JobEnding : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Processor : public std::enable_shared_from_this<Processor> {
public:
    // Runs one action; returns (result code, message). Called on the worker thread.
    using Dispatcher = std::function<std::pair<int, std::string>(const ActionMsg&)>;

    explicit Processor(ProcessorConfig cfg);
    ~Processor();
    void set_dispatcher(Dispatcher d);
    // Connects and registers, retrying with back-off; throws with the reason when it cannot.
    // `controllers`: the active controller, then its backups in takeover order; each attempt that
    // fails moves to the next, round after round (TTP_RETRY_TIMES rounds).
    void start(const std::vector<Endpoint>& controllers);
    void start(const std::string& host, int port) { start(std::vector<Endpoint>{{host, port}}); }
    std::string controller_address() const;  // "host:port" of the controller it registers with now
    // A controller of the list moved (a replaced node hosts one again, on a new port): the entry at
    // `index` now names it. The connection in use is kept; the entry is used from the next attempt.
    void replace_controller(std::size_t index, const Endpoint& controller);
    void stop();

    void set_replica(const ReplicaInfoMsg& info);
    // After PRELOCK no update starts: this blocks until the controller's STOP (at most prelock_wait_ms)
    // and throws std::runtime_error("FORCE STOP ..."); at once when the lock is for a step this rank
    // has already completed.
    // Paused after a step this rank completed (PAUSE, the step its message carries): this first holds
    // until CONTINUE, a recovery's PRELOCK or STOP, a new controller or the end of the link.
    void start_updating(int64_t backup_step);
    // The same hold, for a client that drives its own loop (tft_pause_train); false when still held
    // after timeout_ms (< 0: no timeout but the cap).
    bool hold_if_paused(int timeout_ms);
    int64_t prelock_step() const;  // -1 when not locked
    void end_updating(int64_t step);
    // The optimizer state is being copied (tft_start_copy_os): the rank is no saver or repair source
    // until end_updating marks it Updated again.
    void start_copy();
    // The state was loaded from the checkpoint of `step`: that is now the last completed step.
    void report_loaded_step(int64_t step);
    // A periodic checkpoint of `step` is complete: the controller may reload it online (LOAD_CKPT).
    void report_ckpt_step(int64_t step);
    // The training thread entered a timed section (the controller judges a hang against limit_ms, 0 for
    // none) or left it; both are sent at once. add_progress counts work done inside the section (it
    // tells a hung rank from the peers waiting on it) and travels with the next heartbeat.
    void begin_section(Section section, int64_t limit_ms);
    void end_section();
    void add_progress(uint64_t units);
    // Training is over on this rank (its last step and final save are done): the controller acts on no
    // fault from then on, so a rank lost while the job ends cannot turn the completed run into a failed one.
    void finish();
    void report_error(uint8_t report_state, const std::string& error_code);
    NextAction wait_next_action(int timeout_ms);
    int64_t repair_step() const;
    uint64_t controller_term() const;  // of the controller this rank last registered with; 0: none yet
    Strategy repair_type() const;
    // The ranks the last EXIT named (a hot switch's: every rank it hands over), empty before one came.
    std::vector<int32_t> exit_ranks() const;
    bool paused() const;
    // Started again for a dead rank (MINDIO_RESTARTED=1); stays true for the life of the process.
    bool restarted() const { return cfg_.restarted || accepted_as_replacement_; }
    // May register as a dead rank's replacement without the launcher's marker (enable_arf): the
    // controller decides at the first registration (restarted() is true afterwards when it did).
    void allow_replacement(bool allowed) { allow_replacement_ = allowed; }
    // Why the controller closed the link on purpose (its goodbye), or empty.
    std::string controller_closed() const;
    // Why this rank is cut off from the job, or empty: it lost the leader without proof that its process
    // is gone, a backup found the ranks that reached it a minority (no majority within its wait), and one
    // more round of the list found no controller that takes it. Such a rank must leave the job: it takes
    // no training step (start_updating throws) and writes no checkpoint (no leader sends it one).
    std::string cut_off() const;
    // Waits at most timeout_ms for the processor to be cut off: the reason, empty when the wait ran out,
    // nothing once the processor is stopped (there is nothing more to wait for).
    std::optional<std::string> wait_cut_off(int timeout_ms);
    // Whether the link to the controller is up now (false while reconnecting, and once given up).
    bool connected() const;
    std::map<std::string, uint64_t> stats() const;

private:
    bool pause_due_locked() const;
    int64_t step_compute_ms_locked() const;
    bool hold_while_paused(std::unique_lock<CountedMutex>& lock, std::chrono::milliseconds limit);
    using Clock = std::chrono::steady_clock;
    struct Queued {
        uint64_t seq;
        ActionMsg msg;
    };

    // *no_majority: an idle backup answered that the ranks that reached it are a minority.
    bool connect_and_register(std::string* error, bool* fatal, bool* no_majority);
    // A registration closed unanswered by the controller of term_: a second look for the proof it is gone.
    void recheck_dying_leader(const Endpoint& endpoint);
    // The second RegisterAck of a backup that holds the registration until it may lead.
    Frame await_election(int fd, TlsSession* tls, FrameParser& parser, const std::string& where, const std::string& why);
    Endpoint controller_now() const;
    Endpoint controller_leader() const;  // the controller of term_ (empty before any registration)
    bool try_next_controller(const std::string& why);  // true when the list starts over (or has one entry)
    void net_loop();
    void leave_as_minority(const std::string& why);
    void worker_loop();
    void on_action(uint64_t seq, const std::string& body);
    // Every frame but a status: a status report deferred before it goes first, so the controller reads no reply
    // or report of this rank beside an older state than the rank had when it sent it.
    bool send_frame(const std::string& frame);
    bool send_status(MsgType type);  // this rank's status now (Status or Heartbeat); no deferred one is left
    bool send_raw(const std::string& frame);
    std::string status_frame(MsgType type) const;
    // The step's section starting or ending: its status is sent by the net thread within kDeferredStatusMs, or
    // sooner with the next frame, which carries it (an update's start, a heartbeat). A step's section end and the
    // next one's start then reach the controller in the frame that reports the next update's start: two frames a
    // step instead of four, and half the controller's wake-ups.
    void report_section_change(Section section);
    void defer_status();
    void send_deferred_status();
    void drop_connection(const std::string& why);
    bool on_frame(const Frame& frame);
    void watch_handler();
    void note_late_beat(Clock::time_point now);

    const ProcessorConfig cfg_;
    // The active controller first, then its backups in the order they take over; the processor
    // registers with one at a time, and moves to the next when the one it has cannot be reached.
    std::vector<Endpoint> controllers_;
    size_t current_ = 0;  // guarded by mu_
    mutable CountedMutex mu_;
    std::condition_variable_any cv_;  // waits on a CountedMutex
    mutable CountedMutex send_mu_;
    int fd_ = -1;
    std::unique_ptr<TlsSession> tls_;  // with fd_, under send_mu_: the session when the link is TLS
    std::shared_ptr<TlsContext> tls_context_;  // null: plain TCP
    void close_link_locked();
    bool tls_buffered(int fd) const;
    ssize_t receive(int fd, char* buf, size_t n, std::string* why);
    std::atomic<bool> running_{false};
    std::atomic<bool> stopping_{false};  // stop() or the destructor: no wait may hold them up
    bool lost_ = false;
    std::string closed_by_controller_;  // the controller's goodbye reason: no reconnecting after it
    Dispatcher dispatcher_;
    std::optional<ReplicaInfoMsg> replica_;
    std::optional<ErrorReportMsg> unsent_error_;
    // The fault (or PREREPAIR_FINISH) this rank reported that no NORMAL or EXIT has ended yet: sent
    // again to a controller that took over, which never heard it.
    std::optional<ErrorReportMsg> open_report_;
    // The last action of the recovery this rank is inside (PRELOCK until NORMAL or EXIT), told to the
    // controller at registration; 0: none.
    uint16_t recovery_action_ = 0;
    int64_t step_ = -1;
    int64_t ckpt_step_ = -1;
    DataStatus data_ = DataStatus::Updated;
    RunStatus run_ = RunStatus::Running;
    Section section_ = Section::None;
    Clock::time_point section_started_;
    int64_t section_limit_ms_ = 0;
    std::atomic<uint64_t> progress_{0};
    int64_t repair_step_ = -1;
    int64_t prelock_step_ = -1;  // >= 0 between PRELOCK and the NORMAL/EXIT that ends the fault handling
    Strategy repair_type_ = Strategy::None;
    bool paused_ = false;
    int64_t pause_step_ = -1;  // with paused_: the step after which updates hold
    int holders_ = 0;             // threads holding for the pause (run_ is Paused while any does)
    std::atomic<int64_t> last_progress_ns_{0};  // steady clock of the last add_progress
    int64_t updating_compute_ms_ = -1;  // the compute of the step whose update runs
    int64_t compute_ms_ = -1;           // of the last completed step, sent in every status
    Clock::time_point hold_started_;
    // Registers as a replacement until the controller's NORMAL shows the replacement is complete;
    // a later reconnect is an ordinary one.
    bool joining_ = false;
    std::atomic<bool> allow_replacement_{false};
    std::atomic<bool> accepted_as_replacement_{false};
    bool registered_once_ = false;
    bool refused_as_job_ends_ = false;  // the last registration got kJobEnding
    uint64_t term_ = 0;  // the highest controller term registered under: an older one is refused
    // The controller of term_, and whether its address refused a connection since the link to it broke:
    // the proof, told to a backup in Register::leader_gone, that its process is gone (not a partition).
    // A proof counts only while its host answered every time: once the link or an attempt at that address
    // went silent (a timeout, no route), a later refusal may be a leader that died after a partition, or a
    // job that ended meanwhile, and says nothing about who else is left (link_silent_).
    Endpoint leader_;
    bool leader_gone_ = false;
    std::atomic<bool> link_silent_{false};
    std::string cut_off_;  // see cut_off()
    std::optional<NextAction> next_action_;
    bool told_to_exit_ = false;  // an EXIT came: the process ends, its link is not made again
    std::vector<int32_t> exit_ranks_;  // the error ranks of that EXIT
    bool told_to_exit() {
        std::lock_guard<CountedMutex> lock(mu_);
        return told_to_exit_;
    }
    uint64_t last_seq_ = 0;
    std::string cached_reply_;  // reply frame for last_seq_, empty while it still runs
    std::deque<Queued> queue_;
    std::optional<std::pair<ActionKind, Clock::time_point>> running_action_;
    bool warned_slow_ = false;
    Clock::time_point last_beat_;  // when the net thread last sent a heartbeat: a late one is logged
    std::map<std::string, uint64_t> stats_;
    // What reached the controller (every frame sent, heartbeats too): counted per step by the step path's costs.
    std::atomic<uint64_t> frames_sent_{0}, bytes_sent_{0};
    std::atomic<uint64_t> deferred_frames_{0};  // of frames_sent_: sent by the net thread once their wait was over
    std::atomic<int64_t> status_due_ns_{0};  // steady clock by which a deferred status is sent; 0: none
    int wake_fd_ = -1;  // an eventfd: wakes the net thread when a status is deferred
    std::thread net_thread_, worker_thread_;
};

}  // namespace mindio
