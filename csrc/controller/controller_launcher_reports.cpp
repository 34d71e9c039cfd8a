// A launcher's reports to the controller (members of Controller, kept out of controller.cpp): a rank's
// process ended (ProcessEnded), or a lost node's ranks that nothing will replace (NoReplacement). Each
// comes on a connection of its own, carries the job's token, and is answered with a ProcessEndedAck.
#include <algorithm>

#include "common/log.h"
#include "common/text.h"
#include "controller/controller.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

// A launcher's report that a rank's process ended, answered on its own connection, which then closes.
// The report proves a death only for the process it names: a replacement registered since is not
// touched, and a rank already known dead or gone is only acknowledged.
void Controller::on_process_ended(uint64_t conn, const ProcessEndedMsg& m) {
    std::lock_guard<std::mutex> lock(mu_);
    bool had_left = false;
    const std::string answer = process_ended_locked(m, &had_left);
    inbox_.answer_launcher(conn, had_left ? kProcessEndedAfterLeaving : 0, answer);
}

std::string Controller::process_ended_locked(const ProcessEndedMsg& m, bool* had_left) {
    RankEntry& r = ranks_[m.rank];
    std::string who = "rank " + std::to_string(m.rank);
    std::string process = "process " + std::to_string(m.pid) + " (" + m.how + ")";
    if (!r.registered || (r.pid != 0 && r.pid != m.pid)) {
        // The answer does not name the rank's current process: a peer that could forge a report (no
        // token) would learn the pid that makes its next report a kill.
        return who + (r.registered ? " is now another process" : " never registered") + ": " + process +
               " changes nothing";
    }
    if (r.left && !r.dead) {
        // It said goodbye (its training is over) and then failed on its way out: nothing to replace.
        *had_left = true;
        return who + " had left the job before " + process + " ended: nothing to restart";
    }
    if (intake_.completed()) {
        // Killed on its way out after the last step (no goodbye yet): a process started again would wait for a
        // job that is over, and hold its node's launcher until its timeouts ran out.
        *had_left = true;
        event_locked("process_ended", who + ": " + process + " after the job completed");
        return who + "'s " + process + " ended after the job completed (rank " +
               std::to_string(intake_.finished_rank()) + " finished training): nothing to restart";
    }
    if (r.dead) return who + " was already dead: " + process + " ended";
    event_locked("process_ended", who + ": " + process);
    LOG_WARN(kLog, cfg_.rank, who << "'s " << process << " ended, its launcher reports"
                              << (r.connected ? "; its connection is still open (a child process holds it): closed" : ""));
    if (r.connected) server_.close(r.conn, "its process ended");
    r.end_reported = true;
    declare_dead_locked(m.rank, process + " ended, reported by its launcher");
    cv_.notify_all();
    return who + " declared dead";
}

// The launcher watching the other nodes proved a node's launcher gone, and no standby waits to take its
// place: noted per rank until a process registers for it. Marked even while a rank's connection is still
// open (the report can come before its closed connection is read): only a wait for replacements reads it.
void Controller::on_no_replacement(uint64_t conn, const NoReplacementMsg& m) {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.answer_launcher(conn, 0, no_replacement_locked(m));
}

std::string Controller::no_replacement_locked(const NoReplacementMsg& m) {
    std::set<int> ranks(m.ranks.begin(), m.ranks.end());
    for (int rank : ranks) ranks_[rank].unreplaced_why = m.why;
    std::string what = "ranks " + list_text(ranks) + " will not be replaced: " + m.why;
    event_locked("no_replacement", what);
    if (cfg_.caps.elastic) {
        LOG_WARN(kLog, cfg_.rank, what << "; elastic training goes on without them once they are lost, rather than "
                                          "wait for their replacement (MINDIO_ARF_WAIT_S), and grows back when they return");
    } else {
        LOG_WARN(kLog, cfg_.rank, what << "; without elastic training only a new launcher of their node brings them "
                                          "back, so a wait for their replacement lasts up to "
                                       << cfg_.arf_wait_ms << " ms (MINDIO_ARF_WAIT_S)");
    }
    cv_.notify_all();
    return "noted: " + what;
}

// With elastic training, a wait that lacks only ranks reported as never to be replaced ends now: the
// scale-in follows (scales_in_instead). Without it, the wait goes on: a new launcher may still come.
bool Controller::nothing_comes_for_locked(const std::set<int>& absent, std::string* why) const {
    if (!cfg_.caps.elastic || absent.empty()) return false;
    for (int rank : absent) {
        if (ranks_[rank].unreplaced_why.empty()) return false;
    }
    *why = "ranks " + list_text(absent) + " will not be replaced: " + ranks_[*absent.begin()].unreplaced_why +
           " (not waiting out MINDIO_ARF_WAIT_S)";
    return true;
}

}  // namespace mindio
