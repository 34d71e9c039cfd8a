#include "controller/replica_manager.h"

#include <sstream>
#include <stdexcept>

namespace mindio {
namespace {

std::string list_text(const std::vector<int>& ranks) {
    std::ostringstream os;
    os << "[";
    for (size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
    os << "]";
    return os.str();
}

void check_rank_list(int optimizer_type, int replica_cnt, int replica_shift, const std::vector<int>& ranks) {
    auto fail = [&](const std::string& why) {
        throw std::invalid_argument("replica rank list " + list_text(ranks) + ": " + why);
    };
    if (optimizer_type != 0 && optimizer_type != 1) fail("optimizer type must be 0 or 1");
    if (replica_cnt < 1) fail("replica count must be >= 1, got " + std::to_string(replica_cnt));
    if (replica_shift != 0) fail("replica_shift " + std::to_string(replica_shift) + " is not supported (only 0)");
    if (ranks.empty()) fail("empty");
    std::set<int> seen;
    for (int r : ranks) {
        if (r < 0) fail("holds a negative rank");
        if (!seen.insert(r).second) fail("has duplicates");
    }
    if (replica_cnt > 1 && ranks.size() == 1) fail("replicas need a data-parallel size > 1");
    if (ranks.size() % replica_cnt) fail("size is not divisible by replica count " + std::to_string(replica_cnt));
}

}  // namespace

std::map<int, std::set<int>> SaverPlan::ranks_by_type() const {
    std::map<int, std::set<int>> out;
    for (const auto& s : savers) out[s.optimizer_type].insert(s.rank);
    return out;
}

void ReplicaManager::add(int optimizer_type, int replica_cnt, int replica_shift, const std::vector<int>& ranks) {
    check_rank_list(optimizer_type, replica_cnt, replica_shift, ranks);
    int same_type = 0;
    for (const auto& s : sets_) {
        if (s.optimizer_type != optimizer_type) continue;
        ++same_type;
        if (s.ranks == ranks) {
            if (s.replica_cnt != replica_cnt) {
                throw std::invalid_argument("replica rank list " + list_text(ranks) + " reported with replica count " +
                                            std::to_string(replica_cnt) + " and " + std::to_string(s.replica_cnt));
            }
            return;
        }
        for (int r : ranks) {
            if (s.index.count(r)) {
                throw std::invalid_argument("rank " + std::to_string(r) + " appears in two rank lists of optimizer type " +
                                            std::to_string(optimizer_type) + ": " + list_text(s.ranks) + " and " +
                                            list_text(ranks));
            }
        }
    }
    ReplicaSetInfo info;
    info.optimizer_type = optimizer_type;
    info.group_index = same_type;
    info.replica_cnt = replica_cnt;
    info.ranks = ranks;
    for (size_t i = 0; i < ranks.size(); ++i) info.index[ranks[i]] = static_cast<int>(i);
    sets_.push_back(std::move(info));
}

SaverPlan ReplicaManager::savers(const std::set<int>& unavailable) const {
    SaverPlan plan;
    for (const auto& s : sets_) {
        int g = s.num_shards();
        for (int shard = 0; shard < g; ++shard) {
            int chosen = -1;
            std::vector<int> holders;
            for (size_t i = shard; i < s.ranks.size(); i += g) {
                holders.push_back(s.ranks[i]);
                if (chosen < 0 && !unavailable.count(s.ranks[i])) chosen = s.ranks[i];
            }
            ShardSaver entry{s.optimizer_type, s.group_index, shard, chosen, std::move(holders)};
            (chosen >= 0 ? plan.savers : plan.missing).push_back(entry);
        }
    }
    return plan;
}

std::map<int, RepairPlan> ReplicaManager::repair_pairs(const std::set<int>& bad) const {
    std::map<int, RepairPlan> out;
    for (const auto& s : sets_) {
        RepairPlan& plan = out[s.optimizer_type];
        int d = static_cast<int>(s.ranks.size()), g = s.num_shards();
        for (int i = 0; i < d; ++i) {
            int dst = s.ranks[i];
            if (!bad.count(dst)) continue;
            int src = -1;
            for (int k = 1; k < s.replica_cnt && src < 0; ++k) {
                int candidate = s.ranks[(i + k * g) % d];
                if (!bad.count(candidate)) src = candidate;
            }
            if (src < 0) {
                plan.orphans.push_back(dst);
            } else {
                plan.pairs.emplace_back(src, dst);
            }
        }
    }
    return out;
}

std::string ReplicaManager::describe() const {
    std::string text;
    for (const auto& s : sets_) {
        text += (text.empty() ? "" : "; ") + std::string("type ") + std::to_string(s.optimizer_type) + " R=" +
                std::to_string(s.replica_cnt) + " " + list_text(s.ranks);
    }
    return text;
}

std::set<int> ReplicaManager::update_peers(int rank) const {
    std::set<int> peers;
    for (const auto& s : sets_) {
        auto it = s.index.find(rank);
        if (it == s.index.end()) continue;
        int block = it->second / s.num_shards();
        for (const auto& other : sets_) {
            if (other.optimizer_type != s.optimizer_type || other.replica_cnt != s.replica_cnt) continue;
            int g = other.num_shards();
            for (int i = block * g; i < (block + 1) * g; ++i) peers.insert(other.ranks[i]);
        }
    }
    return peers;
}

}  // namespace mindio
