#include "controller/lease.h"

#include "common/text.h"

namespace mindio {

LeaseVerdict judge_lease(const std::vector<LeaseRank>& ranks) {
    LeaseVerdict v;
    const int world = static_cast<int>(ranks.size());
    for (int rank = 0; rank < world; ++rank) {
        if (ranks[rank].heard || ranks[rank].proven) ++v.counted;
        else v.unknown.insert(rank);
    }
    v.held = 2 * v.counted >= world;
    v.why = std::to_string(v.counted) + " of " + std::to_string(world) + " ranks connected or proven ended" +
            (v.unknown.empty() ? "" : "; ranks " + list_text(v.unknown) + " lost without proof of an end") +
            (v.held ? "" : ": less than half of the world");
    return v;
}

}  // namespace mindio
