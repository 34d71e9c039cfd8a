#include "controller/election.h"

#include <algorithm>

#include "common/text.h"

namespace mindio {

int majority_of(int world_size) { return std::max(world_size, 0) / 2 + 1; }

ElectionVerdict judge_election(int world_size, const std::vector<Candidate>& candidates) {
    std::map<int, Candidate> latest;  // one per rank, its latest claims
    for (const Candidate& c : candidates) {
        if (c.term == 0 || c.rank < 0 || c.rank >= world_size) continue;
        latest[c.rank] = c;
    }
    ElectionVerdict v;
    uint64_t newest = 0;
    for (const auto& [rank, c] : latest) {
        v.supporters.insert(rank);
        newest = std::max(newest, c.term);
    }
    if (v.supporters.empty()) {
        v.why = "no rank that lost its controller registered";
        return v;
    }
    v.term = newest + 1;
    for (const auto& [rank, c] : latest) {
        if (c.term == newest && c.leader_gone) {
            v.proof_rank = rank;
            break;
        }
    }
    const int count = static_cast<int>(v.supporters.size());
    const std::string lost = "the controller of term " + std::to_string(newest);
    const std::string counted = std::to_string(count) + " of " + std::to_string(world_size) + " ranks";
    if (v.proof_rank >= 0) {
        v.lead = true;
        v.why = "rank " + std::to_string(v.proof_rank) + " found " + lost +
                " gone (its address refused a connection): leading as term " + std::to_string(v.term) + " with " +
                counted;
    } else if (count >= majority_of(world_size)) {
        v.lead = true;
        v.why = "ranks " + list_text(v.supporters) + " (" + counted + ", a majority) lost " + lost +
                ", none with proof that it is gone: leading as term " + std::to_string(v.term);
    } else {
        v.why = "ranks " + list_text(v.supporters) + " (" + counted + ", a majority is " +
                std::to_string(majority_of(world_size)) + ") lost " + lost +
                " and none proved it gone (a silence, not a refused connection): it may still lead the others";
    }
    return v;
}

uint64_t Candidacies::add(uint64_t conn, const RegisterMsg& m, Clock::time_point deadline) {
    uint64_t replaced = 0;
    auto it = by_rank_.find(m.rank);
    if (it != by_rank_.end() && it->second.conn != conn) replaced = it->second.conn;
    by_rank_[m.rank] = Entry{conn, m, deadline};
    return replaced;
}

bool Candidacies::drop_conn(uint64_t conn) {
    for (auto it = by_rank_.begin(); it != by_rank_.end(); ++it) {
        if (it->second.conn == conn) {
            by_rank_.erase(it);
            return true;
        }
    }
    return false;
}

std::vector<Candidacies::Entry> Candidacies::take_expired(Clock::time_point now) {
    std::vector<Entry> out;
    for (auto it = by_rank_.begin(); it != by_rank_.end();) {
        if (it->second.deadline <= now) {
            out.push_back(std::move(it->second));
            it = by_rank_.erase(it);
        } else {
            ++it;
        }
    }
    return out;
}

std::vector<Candidacies::Entry> Candidacies::take_all() {
    std::vector<Entry> out;
    for (auto& [rank, entry] : by_rank_) out.push_back(std::move(entry));
    by_rank_.clear();
    return out;
}

std::vector<Candidate> Candidacies::view() const {
    std::vector<Candidate> out;
    for (const auto& [rank, entry] : by_rank_) out.push_back({rank, entry.msg.term, entry.msg.leader_gone});
    return out;
}

}  // namespace mindio
