// The controller: the rank table (rank_table.h) fed by the server thread through the inbox (inbox.h), and
// the state-machine thread that turns faults into an ordered sequence of actions, run by the action engine
// (action_engine.h: one action at a time, a sequence number per action, a reply deadline, resend when a rank
// reconnects). What to do after a fault is the pure planner's answer (planner.h) on a snapshot of the rank
// table taken under the lock; the recovery flows are data (flows.h) run by the flow runner (flow_runner.h).
// This class is the shell that wires its units, each owning its fields: the inbox, the fault intake
// (fault_intake.h), the flow runner, the elastic state (elastic_state.h), the leadership (leadership.h), the
// cluster manager's requests (cluster_requests.h), the event log. One mutex guards all of it. The glue lives
// one concern per file: controller.cpp (the thread's loop, the getters), controller_rank_messages.cpp,
// controller_faults.cpp, controller_flow_steps.cpp, controller_replacement.cpp, controller_hot_switch.cpp,
// controller_pause.cpp, controller_elastic.cpp, controller_takeover.cpp, controller_lease.cpp,
// controller_election.cpp, controller_launcher_reports.cpp, and controller_consultation.cpp (the
// consultations of a fault policy and the cluster manager).
//
// Security (docs/security.md): a processor's Register and a launcher's ProcessEnded are checked against
// the shared token (MINDIO_TOKEN) first, in constant time; a refusal says nothing about the job. Peers
// that did not prove it are refused at their first bad frame and logged in aggregate (refusal_tally.h).
// The link is mutual TLS 1.3 when MINDIO_TLS_* configure it (net/tls.h), plaintext otherwise.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controller/action_engine.h"
#include "controller/cluster_requests.h"
#include "controller/consultation.h"
#include "controller/elastic_state.h"
#include "controller/election.h"
#include "controller/event_log.h"
#include "controller/fault_intake.h"
#include "controller/flow_runner.h"
#include "controller/flows.h"
#include "controller/goodput.h"
#include "controller/inbox.h"
#include "controller/leadership.h"
#include "controller/lease.h"
#include "controller/liveness.h"
#include "controller/pause.h"
#include "controller/planner.h"
#include "controller/rank_table.h"
#include "controller/replica_manager.h"
#include "controller/scale_out.h"
#include "controller/slow_ranks.h"
#include "controller/state_machine.h"
#include "controller/takeover.h"
#include "net/server.h"
#include "protocol/messages.h"

namespace mindio {

struct ControllerConfig {
    TlsFiles tls;  // MINDIO_TLS_*: the controller's link is TLS when set (net/tls.h)
    int world_size = 1;
    int rank = -1;  // -1: standalone under a cluster manager; otherwise the hosting training rank
    Capabilities caps;
    int action_timeout_ms = 180000;  // per action, from TTP_NORMAL_ACTION_TIME_LIMIT
    int exit_timeout_ms = 10000;     // the final EXIT action: short, processors may be gone
    int register_timeout_ms = 5000;  // a connection must register within this
    int frame_timeout_ms = 5000;     // a started frame must complete within this
    int collect_ms = 500;            // after the first fault, wait this long for related ones
    int cluster_wait_ms = 30000;     // MINDIO_WAIT_MINDX_TIME: wait for the cluster manager's strategy
    int prelock_timeout_ms = 30000;  // MINDIO_PRELOCK_TIMEOUT: one wait for laggards after PRELOCK
    int prelock_tries = 3;           // MINDIO_PRELOCK_TRIES: that many waits before giving up on them
    double heartbeat_misses = 3.0;   // a silent rank is a suspect (not dead) after this many of its periods
    int silence_limit_ms = 60000;    // MINDIO_SILENCE_LIMIT_S: a rank silent this long is hung
    int save_wait_ms = 120000;       // MINDIO_SAVE_WAIT_S: a fault waits this long for a save to finish
    int arf_wait_ms = 600000;        // MINDIO_ARF_WAIT_S: wait for restarted processes to register and be ready
    bool arf_wait_is_default = true;  // the user did not set it: the log says so
    int scale_out_wait_ms = 600000;  // MINDIO_SCALE_OUT_WAIT_S: wait for every retired rank's return (elastic)
    // MINDIO_TAKEOVER_WAIT_S: after a backup took over, ranks not registered with it this long after the
    // first are dead (they died with the old controller's node); before, how long an idle backup holds
    // each registration while it waits for a majority (election.h).
    int takeover_wait_ms = 10000;
    SlowRules slow;  // MINDIO_SLOW_FACTOR, MINDIO_SLOW_WINDOW_STEPS, MINDIO_SLOW_WINDOWS (slow_ranks.h)
    std::string token;
    // 1 for the first controller of a job. 0: a backup, which leads once the ranks that lost their
    // controller and registered with it prove that controller gone or are a strict majority (election.h),
    // under one more than the highest term they registered under (a takeover).
    uint64_t term = 1;
};

class Controller : private InboxHost, private FlowHost {
public:
    explicit Controller(ControllerConfig config);
    ~Controller() override;
    int start(const std::string& host, int port);
    void stop();

    State state() const;
    std::vector<ControllerEvent> events() const;
    size_t event_count() const;  // cheaper than events() for a reader that only waits for new ones
    std::map<std::string, uint64_t> stats() const;
    GoodputTotals goodput() const;  // where the job's wall time went so far (goodput.h)
    int64_t repair_step() const;
    uint64_t term() const;  // 0: a backup nobody has registered with yet
    // The replica layout the ranks reported: (optimizer type, list index, replica count, ranks) per list.
    std::vector<ReplicaSetInfo> layout() const;
    // What the controller knows of each rank, for tools, tests and the status page: (step, data status,
    // flags) where flags are "registered", "connected", "suspect", "dead", "joining", "left", "finished";
    // and how long since the controller last heard from it (-1 while it is not connected).
    struct RankView {
        int64_t step;
        DataStatus data;
        std::vector<std::string> flags;
        int64_t silent_ms = -1;
        uint32_t heartbeat_ms = 0;  // the period the rank said it beats at
        std::string domain;         // its failure domain (node), as it reported it
    };
    std::vector<RankView> ranks() const;

    // Cluster-manager side.
    void set_cluster_callback(const std::string& action, ClusterCallback cb);
    void notify_faults(const std::map<int, int>& fault_ranks);
    void notify_strategy(const std::string& strategy);
    void notify_dump();
    // Pause after `after_step` (< 0: the next step every rank can still hold after) for at most hold_ms;
    // "" when asked, else why not (nothing is changed then). CONTINUE by notify_strategy("continue").
    std::string notify_pause(int64_t after_step = -1, int hold_ms = kDefaultPauseHoldMs);
    // Hot switch (controller_hot_switch.cpp): hand `ranks` over to new processes once every rank holds after
    // `after_step` (< 0: as a pause's), their state from live replica peers; "" when asked, else why not.
    std::string notify_hot_switch(const std::set<int>& ranks, int64_t after_step = -1);
    // Withdraws a hot switch asked for and not begun (the reference's "stop switch"); "" or why not.
    std::string cancel_hot_switch();

    // Fault policy: consulted for every reported fault that carries an error code. An empty
    // callback removes it. timeout_ms bounds the whole consultation of one fault handling.
    void set_policy(PolicyCallback cb, int timeout_ms);

private:
    using Clock = std::chrono::steady_clock;
    // What the ranks' and launchers' messages do (InboxHost, inbox.h; controller_rank_messages.cpp,
    // controller_launcher_reports.cpp).
    void on_register(uint64_t conn, RegisterMsg m, const std::string& refusal) override;
    void on_status(const RankStatusMsg& m, bool heartbeat) override;
    void on_replica(const ReplicaInfoMsg& m) override;
    void on_error(const ErrorReportMsg& m) override;
    void on_reply(uint64_t seq, const ActionReplyMsg& m) override;
    void on_goodbye(const GoodbyeMsg& m) override;
    void on_process_ended(uint64_t conn, const ProcessEndedMsg& m) override;
    void on_no_replacement(uint64_t conn, const NoReplacementMsg& m) override;
    bool on_closed_locked(uint64_t conn, const std::string& reason) override;
    void register_locked(uint64_t conn, RegisterMsg m, std::string refusal);
    // Empty, or why a registration is refused for the controller's term.
    std::string term_refusal_locked(const RegisterMsg& m);
    // An idle backup's election (election.h): true when it holds this registration for a majority.
    bool awaits_majority_locked(uint64_t conn, const RegisterMsg& m);
    void take_over_locked(const ElectionVerdict& verdict);
    void expire_candidates_locked();
    void supersede_locked(uint64_t newer);
    // This controller no longer acts (superseded, or stood down without its lease): every connection
    // closes, every registration is refused as "not the job's controller", and no fault is acted on.
    void stop_leading_locked(const std::string& why);
    // The leader's lease (lease.h, controller_lease.cpp): whether it may act on its faults now; past the
    // grace without it, it stands down.
    bool lease_allows_acting_locked(const char* held = "their faults are held, not acted on,");
    std::vector<LeaseRank> lease_ranks_locked() const;
    int lease_grace_ms_locked() const;
    // While a takeover is not settled (takeover.h) no fault is acted on; settles it when it may.
    bool takeover_open_locked();
    void settle_takeover_locked();
    void dump_after_takeover(std::unique_lock<std::mutex>& lock);
    bool accept_replacement_locked(const RegisterMsg& m);
    void note_sub_health_locked(int rank, const std::string& code);  // a rank reported ReportState::SubHealth
    std::string no_replacement_locked(const NoReplacementMsg& m);
    bool nothing_comes_for_locked(const std::set<int>& absent, std::string* why) const;
    std::string process_ended_locked(const ProcessEndedMsg& m, bool* had_left);
    void say_goodbye();

    void run();
    void detect_dead_locked();
    void declare_dead_locked(int rank, const std::string& why);
    void declare_silent_neighbours_dead_locked(int rank);
    void heard_from_locked(int rank);
    void note_finished_locked(int rank);
    void judge_liveness_locked();
    void await_saves(std::unique_lock<std::mutex>& lock, const Faults& faults);
    void add_fault_locked(int rank, FaultKind kind, const std::string& why, const CodedReport* coded = nullptr);
    void transition_locked(State to, const std::string& why);
    void transition(State to, const std::string& why);
    void event_locked(const std::string& kind, const std::string& detail);

    void handle_fault();
    void collect_faults(std::unique_lock<std::mutex>& lock);
    // lock_step: the PRELOCK step the ranks were held to, or -1 to take the highest completed step.
    FaultContext assess_locked(Faults faults, int64_t lock_step = -1);
    int64_t prelock(const Faults& faults);
    std::optional<Strategy> consult_policy(const FaultContext& ctx);
    void note_policy_answer(int rank, const std::string& code, std::optional<Strategy> s, const std::string& error);
    // offer: the strategies the cluster manager may pick (cluster_offer).
    Strategy consult_cluster(const FaultContext& ctx, Strategy own, const std::vector<std::string>& offer);
    // The scale-out (scale_out.h): due when every retired rank returned and is ready; a returned process
    // lost before it, or returns that stay incomplete past the wait, leave the job at its smaller size.
    bool scale_out_due_locked();
    void scale_out();
    void return_lost_locked(int rank, const std::string& why);
    void returned_during_scale_in_locked(int rank);
    void fault_on_untaken_locked(const std::set<int>& failed, const char* action);
    void send_returned_away_locked(const std::set<int>& ranks);
    // Some rank is retired (a scale-in, not grown back): the job runs at a smaller data-parallel size.
    bool scaled_in_locked() const;
    // What a fault may be handled with now: while scaled in, neither online repair nor process
    // replacement (the ranks do not carry them out at the smaller size): the dump of the smaller job.
    Capabilities caps_now_locked() const;
    void take_offline_locked(const std::set<int>& ranks);

    // The steps of the recovery flows (FlowHost, flow_runner.h; controller_flow_steps.cpp and the files of
    // their concern).
    bool lease_holds() override;
    ActionOutcome act(ActionKind kind, const ActionGroups& groups, bool interruptible) override;
    void begin(const Flow& flow, FaultContext& ctx, FlowRun& run) override;
    void begin_dump(FlowRun& run) override;
    void begin_scale_in(FaultContext& ctx, FlowRun& run) override;
    std::string pick_savers(FaultContext& ctx, FlowRun& run) override;
    void take_offline(const std::set<int>& ranks) override;
    std::string await_replacements(const std::set<int>& ranks) override;
    void enter_repair(const std::string& why) override;
    void finish(const Flow& flow, const FaultContext& ctx) override;
    void exit_all(const std::string& why, int result) override;
    void retire(const std::set<int>& ranks, Leaving why) override;
    void return_retired(const std::set<int>& ranks) override;
    std::string hand_over(const FaultContext& ctx, FlowRun& run) override;
    void report_cluster(const ClusterReport& report) override;
    ActionGroups repair_messages(const FaultContext& ctx, Strategy s, const std::map<int, int>& clean_results) override;
    void begin_relayout() override;
    void end_relayout(const std::set<int>& reporters, bool ok) override;
    void running(const std::set<int>& ranks) override;
    void pause_flow();
    void hot_switch_flow();
    std::string hot_switch_refusal_locked(const std::set<int>& ranks) const;
    // A hot switch given up before its hand-over began: training goes on as it was.
    void give_up_hot_switch(std::unique_lock<std::mutex>& lock, const std::string& why, bool continue_ranks);
    void end_pause(const std::string& why);
    std::set<int> send_pause(std::unique_lock<std::mutex>& lock);
    HoldVerdict await_hold(std::unique_lock<std::mutex>& lock);
    std::map<int, PauseSighting> pause_sightings_locked() const;
    void expire_pause_locked();
    void observe_goodput_locked();
    void judge_slow_ranks_locked();

    ActionEngine::Hooks engine_hooks();

    ControllerConfig cfg_;
    Inbox inbox_;  // the server's listener: declared before server_; uses server_, mu_ and ranks_
    Server server_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    State state_ = State::Init;
    RankTable ranks_;
    EventLog events_;
    FaultIntake intake_{events_, cfg_.rank};
    ReplicaManager replicas_;
    Leadership leadership_{events_, cfg_.rank, cfg_.term};
    ActionEngine actions_;  // uses server_, mu_, cv_ and ranks_: declared after them
    FlowRunner flows_{*this, cfg_.caps.elastic};
    int64_t repair_step_ = -1;
    ElasticState elastic_{events_, cfg_.rank, cfg_.scale_out_wait_ms};
    GoodputLedger goodput_{Clock::now()};
    SlowRankJudge slow_;  // after cfg_: built from its rules
    ClusterCallbacks cluster_;
    ClusterRequests requests_;
    std::set<int> awaited_;    // the ranks await_replacements waits for, while it does
    PolicyCallback policy_;
    int policy_timeout_ms_ = 5000;
    std::thread thread_;
};

}  // namespace mindio
