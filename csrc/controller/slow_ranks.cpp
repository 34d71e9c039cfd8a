#include "controller/slow_ranks.h"

#include <algorithm>
#include <sstream>

namespace mindio {
namespace {

int64_t median(std::vector<int64_t> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
}

}  // namespace

SlowRankJudge::SlowRankJudge(SlowRules rules) : rules_(rules) {}

void SlowRankJudge::record(int rank, int64_t step, int64_t compute_ms) {
    if (step < 1 || compute_ms < 0) return;
    windows_[(step - 1) / rules_.window_steps][rank].push_back(compute_ms);
    last_step_[rank] = std::max(last_step_[rank], step);
}

std::vector<SlowNews> SlowRankJudge::judge(const std::set<int>& live) {
    std::vector<SlowNews> news;
    int64_t done = INT64_MAX;  // the last step every live rank completed
    for (int rank : live) {
        auto it = last_step_.find(rank);
        done = std::min(done, it == last_step_.end() ? 0 : it->second);
    }
    while (!windows_.empty() && live.size() > 1 && (windows_.begin()->first + 1) * rules_.window_steps <= done) {
        std::map<int, std::vector<int64_t>> samples;
        for (auto& [rank, computes] : windows_.begin()->second) {
            if (live.count(rank)) samples[rank] = std::move(computes);
        }
        for (auto& n : judge_window(windows_.begin()->first, samples)) news.push_back(std::move(n));
        windows_.erase(windows_.begin());
    }
    return news;
}

std::vector<SlowNews> SlowRankJudge::judge_window(int64_t window, const std::map<int, std::vector<int64_t>>& samples) {
    std::map<int, int64_t> medians;
    for (const auto& [rank, computes] : samples) {
        if (static_cast<int>(computes.size()) * 2 >= rules_.window_steps) medians[rank] = median(computes);
    }
    std::vector<SlowNews> news;
    if (medians.size() < 2) return news;
    std::vector<int64_t> all;
    for (const auto& [rank, m] : medians) all.push_back(m);
    const int64_t peers = median(all);
    for (const auto& [rank, m] : medians) {
        const bool slow_now = m > rules_.factor * peers && m - peers > rules_.floor_ms;
        if (slow_now == slow(rank)) {
            streak_[rank] = 0;
            continue;
        }
        if (++streak_[rank] < rules_.windows) continue;
        streak_[rank] = 0;
        std::ostringstream why;
        why << "steps " << window * rules_.window_steps + 1 << "-" << (window + 1) * rules_.window_steps
            << ": compute " << m << " ms per step against the ranks' median of " << peers << " ms ("
            << rules_.windows << " windows of " << rules_.window_steps << " steps in a row "
            << (slow_now ? "over " : "within ") << rules_.factor << "x)";
        if (slow_now) slow_.insert(rank);
        else slow_.erase(rank);
        news.push_back({rank, slow_now, why.str()});
    }
    return news;
}

}  // namespace mindio
