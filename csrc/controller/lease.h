// A leader's lease (docs/controller.md, "Backups, terms and failure domains"). An idle backup leads
// without proof only a strict majority of the world (election.h); the leader, in turn, acts on a fault
// only while at least half of the world is accounted for: ranks still connected to it and not declared
// dead (a silent one counts until the hang rule names it), and ranks whose end is proven (their launcher
// reported the process ended, they finished or left the job). A tie goes to the leader, which the
// backup's strict majority cannot match, so two controllers never act at once.
// A leader on the smaller side of a partition sees the others' connections reset, or their silence named
// by the hang rule, which a death looks like too: without the lease it must not dump, replace or end
// anything, because a backup may be leading those ranks now. It holds its faults; if the lease does not
// come back within the time the other side needs to notice the loss, it stands down and its ranks walk
// their controller list (to the new leader, or, as a minority, out of the job).
// The lease applies only when some rank's list names backups: with one controller nobody else can lead.
// Pure, so the unit tests walk it through the bindings.
#pragma once
#include <set>
#include <string>
#include <vector>

namespace mindio {

struct LeaseRank {
    bool heard = false;   // registered, connected and not declared dead (a replacement that registered included)
    bool proven = false;  // its end is known for certain: a launcher's report, or it finished or left
};

struct LeaseVerdict {
    bool held = true;
    int counted = 0;          // ranks heard or proven
    std::set<int> unknown;    // the others: lost (a closed connection, named by the hang rule) with no proof of an end
    std::string why;          // the count in words, as logged
};

LeaseVerdict judge_lease(const std::vector<LeaseRank>& ranks);

}  // namespace mindio
