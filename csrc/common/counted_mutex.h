// A mutex that counts how often it was taken: the processor's locks are on the training thread's path at every
// step, and tests hold their number per step to a budget (mindio_adaptor/core/steps/step_path_costs.py).
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>

namespace mindio {

class CountedMutex {
public:
    void lock() {
        mu_.lock();
        taken_.fetch_add(1, std::memory_order_relaxed);
    }
    bool try_lock() {
        if (!mu_.try_lock()) return false;
        taken_.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    void unlock() { mu_.unlock(); }
    uint64_t taken() const { return taken_.load(std::memory_order_relaxed); }

private:
    std::mutex mu_;
    std::atomic<uint64_t> taken_{0};
};

}  // namespace mindio
