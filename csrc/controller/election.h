// When an idle backup controller may lead the job (docs/controller.md, "Backups, terms and failure
// domains"). A backup is asked by the ranks that lost the controller they were registered with (their
// Register carries that controller's term, and whether they proved its process gone):
// - with proof that the process of the controller of the candidates' highest term is gone (a rank's
//   connection to its address was refused: the host answered and nothing listens there), the backup
//   leads at once, whatever the number of ranks (the leader's node died and took ranks with it);
// - without proof (the leader fell silent: a timeout, no route), it leads only a strict majority of
//   the world: a network partition may have cut these ranks off from a leader that still leads the
//   others, and two leaders of one job must never act. A majority cannot exist twice.
// Pure, so the unit tests walk it through the bindings; the controller holds the waiting registrations
// in Candidacies, each for a bounded time (MINDIO_TAKEOVER_WAIT_S), and runs the rule on every change.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "protocol/messages.h"

namespace mindio {

struct Candidate {
    int rank = -1;
    uint64_t term = 0;         // the term the rank registered under last (RegisterMsg::term); 0: never
    bool leader_gone = false;  // it proved that controller's process gone (RegisterMsg::leader_gone)
};

struct ElectionVerdict {
    bool lead = false;
    uint64_t term = 0;          // the term to lead under: one more than the candidates' highest; 0: no candidate
    std::set<int> supporters;   // the distinct ranks counted
    int proof_rank = -1;        // the rank whose proof made the backup lead; -1: none (a majority, or a wait)
    std::string why;            // the verdict in words, as logged
};

// The smallest strict majority of `world_size` ranks.
int majority_of(int world_size);

// `candidates` in arrival order: a rank that appears again counts once, with its latest claims; a
// candidate of term 0 (it never registered with any controller) or outside 0..world_size-1 counts for
// nothing. Proof counts only from a candidate of the highest term: a rank that lost an older controller
// says nothing about the newest one.
ElectionVerdict judge_election(int world_size, const std::vector<Candidate>& candidates);

// The registrations an idle backup holds open, unanswered but for "awaiting a majority", until the
// rule lets it lead or each one's deadline passes. One per rank: a rank's newer registration replaces
// its older one.
class Candidacies {
public:
    using Clock = std::chrono::steady_clock;
    struct Entry {
        uint64_t conn = 0;
        RegisterMsg msg;
        Clock::time_point deadline;
    };
    // Adds `m` on `conn`; returns the connection of the same rank's earlier registration, or 0.
    uint64_t add(uint64_t conn, const RegisterMsg& m, Clock::time_point deadline);
    bool drop_conn(uint64_t conn);  // the connection closed: that rank no longer counts
    std::vector<Entry> take_expired(Clock::time_point now);
    std::vector<Entry> take_all();
    std::vector<Candidate> view() const;
    bool empty() const { return by_rank_.empty(); }

private:
    std::map<int, Entry> by_rank_;
};

}  // namespace mindio
