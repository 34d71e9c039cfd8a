// Who holds which optimizer shard, as reported by the processors (tft_set_optimizer_replica).
// The rules mirror mindio_adaptor/core/layout/replica_layout.py exactly (a test compares the two): for a rank
// list L of d ranks and R replicas, g = d / R shards; shard j is held by L[j], L[j+g], ...
#pragma once
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mindio {

struct ReplicaSetInfo {
    int optimizer_type = 0;
    int group_index = 0;  // position among the sets of the same optimizer type, in order of first report
    int replica_cnt = 1;
    std::vector<int> ranks;
    std::unordered_map<int, int> index;
    int num_shards() const { return static_cast<int>(ranks.size()) / replica_cnt; }
};

struct ShardSaver {
    int optimizer_type, group_index, shard, rank;  // rank -1: no available holder
    std::vector<int> holders = {};                  // every rank that holds the shard
};

struct SaverPlan {
    std::vector<ShardSaver> savers;
    std::vector<ShardSaver> missing;
    bool complete() const { return missing.empty(); }
    std::map<int, std::set<int>> ranks_by_type() const;
};

struct RepairPlan {
    std::vector<std::pair<int, int>> pairs;  // (src, dst)
    std::vector<int> orphans;                // bad ranks with no healthy holder of their shard
};

class ReplicaManager {
public:
    // Adds one rank list. Re-reporting an identical list is a no-op; a list that is malformed or overlaps
    // a different list of the same optimizer type throws std::invalid_argument naming the problem.
    void add(int optimizer_type, int replica_cnt, int replica_shift, const std::vector<int>& ranks);
    SaverPlan savers(const std::set<int>& unavailable) const;
    std::map<int, RepairPlan> repair_pairs(const std::set<int>& bad) const;
    // The ranks that take part in `rank`'s optimizer update: its distributed-optimizer instance. Block
    // k of every rank list (its k-th replica group) belongs to instance k, with the model-parallel
    // peers that hold block k of the other lists. Empty when `rank` is in no list.
    std::set<int> update_peers(int rank) const;
    bool empty() const { return sets_.empty(); }
    // "type T R=r [ranks]; ..." for the logs.
    std::string describe() const;
    const std::vector<ReplicaSetInfo>& sets() const { return sets_; }
    void clear() { sets_.clear(); }

private:
    std::vector<ReplicaSetInfo> sets_;
};

}  // namespace mindio
