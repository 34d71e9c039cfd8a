// Process replacement (ARF): members of Controller that take ranks offline and await their restarted processes.
#include <algorithm>

#include "common/log.h"
#include "common/text.h"
#include "controller/controller.h"
#include "controller/controller_timing.h"

namespace mindio {
namespace {

constexpr const char* kLog = "controller";

}  // namespace

// The old processes of ranks with a process/node fault are not used again: a rank still connected
// (a fault reported by the cluster manager) is cut off, so only its restarted process can come back.
void Controller::take_offline_locked(const std::set<int>& ranks) {
    for (int rank : ranks) {
        RankEntry& r = ranks_[rank];
        event_locked("offline", "rank " + std::to_string(rank));
        if (r.joining || r.dead) continue;  // gone already, or its replacement registered early
        r.dead = true;
        if (!r.connected) continue;
        // Still running (a fault the cluster manager or a policy named): told to exit, then cut off.
        FaultContext none;
        none.repair_step = repair_step_;
        actions_.send_untracked_locked({rank}, base_action(ActionKind::Exit, none, Strategy::Recover));
        server_.close(r.conn, "rank taken offline for process replacement (ARF)");
    }
    LOG_INFO(kLog, cfg_.rank, "ranks " << list_text(ranks) << " offline; waiting up to " << cfg_.arf_wait_ms
                                       << " ms (MINDIO_ARF_WAIT_S" << (cfg_.arf_wait_is_default ? ", its default" : "")
                                       << ") for their restarted processes");
}

// Waits (at most arf_wait_ms) until a restarted process of every rank in `ranks` registered and
// reported PREREPAIR_FINISH. The reason on a timeout, a new fault or shutdown, else ""; a replacement lost
// before it was ready is none of these: the next one its launcher starts is awaited.
std::string Controller::await_replacements(const std::set<int>& ranks) {
    std::unique_lock<std::mutex> lock(mu_);
    event_locked("arf_wait", "ranks " + list_text(ranks) + " up to " + std::to_string(cfg_.arf_wait_ms) + " ms");
    awaited_ = ranks;  // a replacement lost while joining is awaited again, no new fault (declare_dead_locked)
    struct Done {
        std::set<int>& awaited;
        ~Done() { awaited.clear(); }
    } done{awaited_};
    std::string why;
    auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.arf_wait_ms);
    while (true) {
        std::set<int> absent, unready;
        for (int r : ranks) {
            const RankEntry& e = ranks_[r];
            if (!e.joining || e.dead) absent.insert(r);
            else if (!e.ready) unready.insert(r);
        }
        if (absent.empty() && unready.empty()) {
            event_locked("arf_ready", "ranks " + list_text(ranks));
            return "";
        }
        if (stopping_) why = "the controller is shutting down";
        else if (unready.empty() && nothing_comes_for_locked(absent, &why)) event_locked("arf_unreplaced", why);
        else if (intake_.second_fault()) why = "a new fault arrived while waiting for the replacement of ranks " + list_text(ranks);
        else if (Clock::now() >= deadline) {
            why = "process replacement timed out after " + std::to_string(cfg_.arf_wait_ms) + " ms (MINDIO_ARF_WAIT_S):";
            if (!absent.empty()) why += " no restarted process registered for ranks " + list_text(absent) + ";";
            if (!unready.empty()) why += " ranks " + list_text(unready) + " registered but did not report ready;";
            event_locked("arf_timeout", why);
        }
        if (!why.empty()) {
            LOG_ERROR(kLog, cfg_.rank, why);
            return why;
        }
        cv_.wait_until(lock, std::min(deadline, Clock::now() + kTick));
        detect_dead_locked();
    }
}

}  // namespace mindio
