// Slow ranks: a rank whose compute stays slower than its peers', a signal of sub-healthy hardware that no
// fault rule sees (the peers wait for it in every gradient collective, so every rank's step is as slow).
//
// What each rank reports with its step (RankStatus.compute_ms): the time from its step's start to its last
// forward or backward, before its gradients are synced. A peer waiting for a slow rank waits in that sync,
// outside its compute, so only the slow rank's compute grows. Judged per window of `window_steps` steps: a
// rank's median compute in the window against the median of all ranks' medians; slower than `factor` times
// that (and by more than floor_ms) is a slow window; `windows` slow windows in a row make the rank slow, as
// many calm windows in a row make it well again. One long step (a data-loader hiccup) does not move a
// median; a checkpoint save is not in the step. Pure: the controller feeds it under its lock; the unit
// tests walk synthetic steps through the bindings.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace mindio {

struct SlowRules {
    double factor = 1.5;     // MINDIO_SLOW_FACTOR
    int64_t floor_ms = 20;   // and slower by at least this much (tiny steps are noisy)
    int window_steps = 10;   // MINDIO_SLOW_WINDOW_STEPS
    int windows = 3;         // MINDIO_SLOW_WINDOWS: in a row, to call a rank slow or well again
};

struct SlowNews {
    int rank = -1;
    bool slow = false;  // true: newly slow; false: well again
    std::string why;
};

class SlowRankJudge {
public:
    explicit SlowRankJudge(SlowRules rules = {});
    void record(int rank, int64_t step, int64_t compute_ms);  // the compute of `step` on `rank`
    // Judges every window that each of the `live` ranks has completed; what changed, in rank order.
    std::vector<SlowNews> judge(const std::set<int>& live);
    bool slow(int rank) const { return slow_.count(rank) > 0; }
    const SlowRules& rules() const { return rules_; }

private:
    std::vector<SlowNews> judge_window(int64_t window, const std::map<int, std::vector<int64_t>>& samples);

    SlowRules rules_;
    std::map<int64_t, std::map<int, std::vector<int64_t>>> windows_;  // window -> rank -> computes
    std::map<int, int64_t> last_step_;
    std::map<int, int> streak_;  // windows in a row on the other side of the rank's current verdict
    std::set<int> slow_;
};

}  // namespace mindio
