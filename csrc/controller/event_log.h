// What the controller did and saw, in order, for tools and tests (Controller::events()): each event with its
// time in seconds since the controller started. Under the controller's lock, as every unit of it.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace mindio {

struct ControllerEvent {
    double t;  // seconds since the controller started
    std::string kind;
    std::string detail;
};

class EventLog {
public:
    using Clock = std::chrono::steady_clock;

    void note(const std::string& kind, const std::string& detail) {
        events_.push_back({std::chrono::duration<double>(Clock::now() - started_).count(), kind, detail});
    }
    const std::vector<ControllerEvent>& all() const { return events_; }

private:
    Clock::time_point started_ = Clock::now();
    std::vector<ControllerEvent> events_;
};

}  // namespace mindio
