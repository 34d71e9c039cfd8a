#include "controller/planner.h"

#include <algorithm>
#include <sstream>

#include "common/text.h"

namespace mindio {
namespace {

std::set<int> repairable_ranks(const std::map<int, RepairPlan>& pairs) {
    std::set<int> out;
    for (const auto& [type, plan] : pairs) {
        for (auto [src, dst] : plan.pairs) out.insert(dst);
    }
    return out;
}

// With a process/node fault the dead ranks are the ones to repair (into their replacements).
bool every_rank_repairable(const ReplicaManager& replicas, const FaultContext& ctx) {
    std::set<int> can = repairable_ranks(replicas.repair_pairs(ctx.unavailable));
    std::set<int> to_repair = ctx.repair_set;
    to_repair.insert(ctx.replace.begin(), ctx.replace.end());
    return std::all_of(to_repair.begin(), to_repair.end(), [&](int r) { return can.count(r) > 0; });
}

std::string decision_text(const Plan& p) {
    std::ostringstream why;
    why << "faults";
    for (const auto& [rank, f] : p.ctx.faults) why << " " << rank << ":" << fault_kind_name(f.kind);
    why << " repair_step=" << p.ctx.repair_step << " repair_set=" << list_text(p.ctx.repair_set)
        << " repairable=" << p.input.repairable << " dump_possible=" << p.input.dump_possible;
    if (!p.input.repairable) why << " reload_step=" << p.reloadable_step;
    return why.str();
}

bool every_live_rank_reported(const RankSnapshots& ranks, const Faults& faults) {
    std::set<int> live = live_ranks(ranks);
    return std::all_of(live.begin(), live.end(), [&](int r) { return faults.count(r) > 0; });
}

// One rank's memory error, its data intact or mid-update (so its replica peers or a reload repair it),
// and every rank in the job: a further fault could only come from a dying rank, whose lost connection
// the window waits for anyway.
bool lone_memory_error(const RankSnapshots& ranks, const Faults& faults) {
    if (faults.size() != 1) return false;
    const auto& [rank, fault] = *faults.begin();
    if (fault.kind != FaultKind::Memory || rank < 0 || rank >= static_cast<int>(ranks.size())) return false;
    if (ranks[rank].data == DataStatus::Copying) return false;
    return std::all_of(ranks.begin(), ranks.end(), [](const RankSnapshot& r) { return r.live(); });
}

RepairType receiver_type(int rank, const FaultContext& ctx, const std::map<int, int>& clean_results) {
    if (ctx.replace.count(rank)) return RepairType::RecvRepair;
    auto clean = clean_results.find(rank);
    return clean != clean_results.end() && clean->second == kCleanNeedsNoRebuild ? RepairType::UceLowLevel
                                                                                  : RepairType::UceHighLevel;
}

}  // namespace

std::set<int> live_ranks(const RankSnapshots& ranks) {
    std::set<int> live;
    for (size_t i = 0; i < ranks.size(); ++i) {
        if (ranks[i].live()) live.insert(static_cast<int>(i));
    }
    return live;
}

std::set<int> blocked_by_faults(const RankSnapshots& ranks, const ReplicaManager& replicas,
                                const std::set<int>& faulty, int64_t step) {
    std::set<int> blocked;
    for (int f : faulty) {
        if (f < 0 || f >= static_cast<int>(ranks.size()) || ranks[f].step >= step) continue;
        for (int peer : replicas.update_peers(f)) {
            if (!faulty.count(peer)) blocked.insert(peer);
        }
    }
    return blocked;
}

PrelockPlan plan_prelock(const RankSnapshots& ranks, const ReplicaManager& replicas, const std::set<int>& faulty) {
    PrelockPlan p;
    p.live = live_ranks(ranks);
    for (int r : p.live) p.step = std::max(p.step, ranks[r].step);
    p.blocked = blocked_by_faults(ranks, replicas, faulty, p.step);
    for (int r : p.live) {
        const RankSnapshot& e = ranks[r];
        bool waited_for = !faulty.count(r) && !p.blocked.count(r);
        if (waited_for && (e.data != DataStatus::Updated || e.step != p.step)) p.level = false;
    }
    return p;
}

std::set<int> prelock_laggards(const RankSnapshots& ranks, const PrelockPlan& plan, const std::set<int>& faulty) {
    std::set<int> behind;
    for (int r : plan.live) {
        const RankSnapshot& e = ranks[r];
        if (faulty.count(r) || e.dead || e.excluded || plan.blocked.count(r)) continue;
        if (e.step < plan.step) behind.insert(r);
    }
    return behind;
}

std::optional<std::string> collection_can_close(const RankSnapshots& ranks, const Faults& faults, int64_t open_ms,
                                                bool connection_losses_pending, bool policy_set) {
    if (faults.empty() || connection_losses_pending || policy_set) return std::nullopt;
    if (every_live_rank_reported(ranks, faults)) return "every live rank reported";
    if (open_ms >= kCoincidentReportsMs && lone_memory_error(ranks, faults)) {
        return "a lone memory error, every other rank healthy";
    }
    return std::nullopt;
}

FaultContext assess(const RankSnapshots& ranks, Faults faults, int64_t lock_step) {
    FaultContext ctx;
    ctx.faults = std::move(faults);
    std::set<int> live = live_ranks(ranks);
    for (size_t i = 0; i < ranks.size(); ++i) {
        int r = static_cast<int>(i);
        if (!live.count(r)) ctx.unavailable.insert(r);
        if (ranks[i].dead || !ranks[i].registered || ranks[i].joining) ctx.dead.insert(r);
    }
    for (int r : live) ctx.repair_step = std::max(ctx.repair_step, ranks[r].step);
    if (lock_step >= 0) ctx.repair_step = lock_step;
    for (int r : live) {
        if (ranks[r].data != DataStatus::Updated || ranks[r].step != ctx.repair_step) ctx.not_ready.insert(r);
    }
    for (const auto& [rank, fault] : ctx.faults) {
        if (fault.kind == FaultKind::Memory) {
            ctx.repair_set.insert(rank);
            ctx.is_uce = true;
        }
        if (fault.kind == FaultKind::Node) ctx.replace.insert(rank);
    }
    ctx.unavailable.insert(ctx.replace.begin(), ctx.replace.end());
    ctx.repair_set.insert(ctx.not_ready.begin(), ctx.not_ready.end());
    ctx.unavailable.insert(ctx.repair_set.begin(), ctx.repair_set.end());
    return ctx;
}

int64_t reloadable_step(const RankSnapshots& ranks, const FaultContext& ctx) {
    if (!ctx.replace.empty() || !ctx.dead.empty()) return -1;
    int64_t step = -1;
    for (int r : live_ranks(ranks)) {
        int64_t saved = ranks[r].ckpt_step;
        if (saved < 0 || (step >= 0 && saved != step)) return -1;
        step = saved;
    }
    return step <= ctx.repair_step ? step : -1;
}

Plan plan_fault(const RankSnapshots& ranks, const ReplicaManager& replicas, const Capabilities& caps, Faults faults,
                int64_t lock_step) {
    Plan p;
    p.ctx = assess(ranks, std::move(faults), lock_step);
    DecisionInput& in = p.input;
    for (const auto& [rank, f] : p.ctx.faults) in.kinds.insert(f.kind);
    in.repairable = every_rank_repairable(replicas, p.ctx);
    p.savers = replicas.savers(p.ctx.unavailable);
    // Before the first update completes nothing is worth a checkpoint (the job's start is its resume point):
    // a save would be asked for step -1, which no rank has (seen on a GPU, docs/gpu_check.md).
    in.dump_possible = !replicas.empty() && p.savers.complete() && p.ctx.repair_step >= 0;
    p.reloadable_step = reloadable_step(ranks, p.ctx);
    in.reload_possible = p.reloadable_step >= 0;
    if (!in.repairable) p.ctx.reload_step = p.reloadable_step;
    p.strategy = decide(caps, in);
    p.why = decision_text(p);
    return p;
}

std::string missing_shards_text(const SaverPlan& plan) {
    std::string text;
    for (const auto& s : plan.missing) {
        text += " type " + std::to_string(s.optimizer_type) + " group " + std::to_string(s.group_index) +
                " shard " + std::to_string(s.shard) + " (holders " + list_text(s.holders) + " all dead, faulty or behind);";
    }
    return text;
}

std::string exit_reason(const Plan& plan) {
    if (plan.input.dump_possible) return plan.why;
    if (plan.ctx.repair_step < 0) return plan.why + "; nothing to dump: no step has completed yet";
    return plan.why + "; dump impossible, no complete replica:" + missing_shards_text(plan.savers);
}

// Elastic training goes on from the survivors' copies: a shard no survivor holds rules the scale-in out too.
std::string scale_in_refusal(const Plan& plan, bool elastic) {
    if (!elastic || plan.savers.missing.empty()) return "";
    return " elastic training cannot scale in either: no survivor holds these shards, the job ends";
}

// The scale-in without the wait for replacements (the cluster manager knows none will come, or the job is scaled
// in already): only for lost processes (a live faulty rank would have to leave the job first), with the
// communication errors their loss caused in live peers (those go on, as in a process replacement), and only
// where the dump it starts from is possible (every shard has a surviving holder).
bool scale_in_offerable(const Capabilities& caps, const DecisionInput& in) {
    const bool lost = in.kinds.count(FaultKind::Node) > 0;
    const bool lost_processes_only = lost && std::all_of(in.kinds.begin(), in.kinds.end(), [](FaultKind k) {
        return k == FaultKind::Node || k == FaultKind::Comm;
    });
    return caps.elastic && lost_processes_only && in.dump_possible && !in.during_repair;
}

const char* cluster_name(Strategy s) {
    return s == Strategy::ScaleIn ? "downgrade" : strategy_name(s);
}

std::vector<std::string> cluster_offer(const Plan& plan, const Capabilities& caps, Strategy chosen) {
    const DecisionInput& in = plan.input;
    const auto at_most = [&](Strategy s) { return static_cast<int>(chosen) <= static_cast<int>(s); };
    bool retry = (in.repairable || in.reload_possible) && caps.retry && at_most(Strategy::Retry);
    bool recover = strategy_feasible(Strategy::Recover, caps, in) && !plan.ctx.replace.empty() && at_most(Strategy::Recover);
    bool node_fault = in.kinds.count(FaultKind::Node) > 0;
    std::vector<std::string> offer;
    if (retry && !node_fault) offer.push_back("retry");
    if (recover) offer.push_back("recover");
    if (scale_in_offerable(caps, in) && chosen != Strategy::Exit) offer.push_back(cluster_name(Strategy::ScaleIn));
    if (in.dump_possible) offer.push_back("dump");
    offer.push_back("exit");
    return offer;
}

void replace_faulty(FaultContext& ctx) {
    for (const auto& [rank, f] : ctx.faults) {
        if (f.kind != FaultKind::Comm) ctx.replace.insert(rank);
    }
    if (ctx.replace.empty()) {
        for (const auto& [rank, f] : ctx.faults) ctx.replace.insert(rank);
    }
    for (int r : ctx.replace) ctx.repair_set.erase(r);
    ctx.unavailable.insert(ctx.replace.begin(), ctx.replace.end());
}

RepairAssignment plan_repair(const std::map<int, RepairPlan>& pairs, const FaultContext& ctx,
                             const std::map<int, int>& clean_results) {
    RepairAssignment out;
    for (const auto& [type, plan] : pairs) {
        RepairInfoMsg info;
        info.optimizer_type = static_cast<uint8_t>(type);
        std::set<int> members;
        for (auto [src, dst] : plan.pairs) {
            if (!ctx.repair_set.count(dst) && !ctx.replace.count(dst)) continue;
            info.src.push_back(src);
            info.dst.push_back(dst);
            members.insert(src);
            members.insert(dst);
        }
        if (members.empty()) continue;
        info.rank_list.assign(members.begin(), members.end());
        for (int r : members) {
            RepairInfoMsg mine = info;
            bool receives = std::find(info.dst.begin(), info.dst.end(), r) != info.dst.end();
            RepairType role = receives ? receiver_type(r, ctx, clean_results) : RepairType::Send;
            mine.repair_type = static_cast<uint8_t>(role);
            out.by_rank[r].push_back(std::move(mine));
        }
        out.by_type.push_back(std::move(info));
    }
    return out;
}

RepairInfoMsg reload_info(const std::set<int>& ranks) {
    RepairInfoMsg info;
    info.repair_type = static_cast<uint8_t>(RepairType::LoadCkpt);
    info.rank_list.assign(ranks.begin(), ranks.end());
    return info;
}

void exclude_untrusted_savers(const RankSnapshots& ranks, const Faults& pending, std::set<int>& unavailable) {
    for (size_t i = 0; i < ranks.size(); ++i) {
        const RankSnapshot& r = ranks[i];
        if (r.dead || r.excluded || !r.registered || r.joining) unavailable.insert(static_cast<int>(i));
    }
    for (const auto& [rank, f] : pending) {
        if (f.kind == FaultKind::Memory || f.kind == FaultKind::Node) unavailable.insert(rank);
    }
}

std::string dump_refusal(const ReplicaManager& replicas, const SaverPlan& savers) {
    if (!replicas.empty() && savers.complete()) return "";
    std::string missing = replicas.empty() ? " no replica layout was reported" : missing_shards_text(savers);
    return "dump impossible, no complete replica:" + missing;
}

}  // namespace mindio
