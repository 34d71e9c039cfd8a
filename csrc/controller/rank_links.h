// What the action engine reads and marks of the rank table: a narrow view, so that the engine knows
// how to reach a rank and nothing else of the controller.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mindio {

// Called with the controller's lock held.
class RankLinks {
public:
    virtual size_t rank_count() const = 0;
    virtual bool connected(int rank) const = 0;
    virtual uint64_t conn(int rank) const = 0;
    virtual uint64_t generation(int rank) const = 0;  // bumps on every (re-)registration
    virtual const char* gone(int rank) const = 0;     // why it will never reply (dead, left); null otherwise
    virtual void exclude(int rank) = 0;               // it failed an action: out of the job
    virtual void no_reply(int rank) = 0;              // it let an action's deadline pass without a word

protected:
    ~RankLinks() = default;
};

}  // namespace mindio
