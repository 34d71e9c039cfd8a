// Whether this controller leads its job, and on what ground: its term (0: an idle backup), why it no longer
// acts (superseded by a higher term, or stood down without its lease), the registrations an idle backup holds
// for a majority (election.h), a takeover until it is settled (takeover.h) and the recovery it left to dump,
// and the leader's lease (lease.h): since when it is lost, and whether it applies (some rank lists backups).
// Under the controller's lock, as every unit of it.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "controller/election.h"
#include "controller/event_log.h"
#include "controller/lease.h"

namespace mindio {

class Leadership {
public:
    using Clock = std::chrono::steady_clock;
    Leadership(EventLog& events, int log_rank, uint64_t term) : events_(events), log_rank_(log_rank), term_(term) {}

    uint64_t term() const { return term_; }
    bool idle_backup() const { return term_ == 0; }
    bool may_lead() const { return not_leading_.empty(); }
    const std::string& not_leading() const { return not_leading_; }  // empty while it leads or may lead
    void stop_leading(const std::string& why) { not_leading_ = why; }

    Candidacies& candidates() { return candidates_; }  // an idle backup's held registrations

    // A backup leads from `term` on; the other ranks have `wait_ms` to register with it.
    void take_over(uint64_t term, int wait_ms);
    bool took_over() const { return took_over_; }
    bool settling() const { return settle_by_.has_value(); }
    // True while the takeover waits for the ranks; false once (and after) it is settled.
    bool unsettled(bool all_back);
    // The recovery the old controller left ends in a dump, for `why`.
    void dump_after_takeover(const std::string& why) { takeover_dump_ = why; }
    bool takeover_dump_due() const { return !takeover_dump_.empty(); }
    std::string take_takeover_dump();

    void note_backups_listed() { backups_listed_ = true; }
    bool lease_applies() const { return backups_listed_; }
    // Whether the faults may be acted on under `lease`: lost, they are held for `grace_ms`, then `stand_down`
    // says why this controller gives way. `held` says what is held, for the log.
    bool lease_allows_acting(const LeaseVerdict& lease, int grace_ms, const char* held, std::string* stand_down);

private:
    EventLog& events_;
    const int log_rank_;
    uint64_t term_;
    std::string not_leading_;
    Candidacies candidates_;
    bool took_over_ = false;  // a backup that took over from a controller of an earlier term
    Clock::time_point took_over_at_;
    std::optional<Clock::time_point> settle_by_;  // set while the takeover is not settled
    std::string takeover_dump_;  // why the recovery the old controller left ends in a dump; empty: it does not
    bool backups_listed_ = false;  // some rank's controller list names backups: the lease applies
    std::optional<Clock::time_point> lease_lost_since_;  // the lease is lost and faults are held since then
};

}  // namespace mindio
