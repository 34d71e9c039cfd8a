// The goodput ledger (goodput.h) as Controller feeds it: its state at every transition and tick, the
// highest step a live rank completed, and what the live ranks do by their sections.
#include "controller/controller.h"

namespace mindio {

void Controller::observe_goodput_locked() {
    int64_t step = -1;
    auto activity = GoodputLedger::Activity::Training;
    for (const auto& r : ranks_) {
        if (!r.live()) continue;
        step = std::max(step, r.step);
        if (r.section == Section::Startup) activity = GoodputLedger::Activity::StartingUp;
        else if ((r.section == Section::Save || r.section == Section::Eval) &&
                 activity == GoodputLedger::Activity::Training) activity = GoodputLedger::Activity::Saving;
    }
    goodput_.observe(Clock::now(), state_, step, activity);
}

GoodputTotals Controller::goodput() const {
    std::lock_guard<std::mutex> lock(mu_);
    return goodput_.totals(Clock::now());
}

}  // namespace mindio
