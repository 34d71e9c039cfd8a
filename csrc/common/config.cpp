#include "common/config.h"

#include <cstdlib>

#include "common/env.h"

namespace mindio {
namespace {

int ms(double seconds) { return static_cast<int>(seconds * 1000.0 + 0.5); }

}  // namespace

int action_time_limit_ms() {
    long limit_s = env_int("TTP_NORMAL_ACTION_TIME_LIMIT", 180, 30, 1800);
    double test_s = env_seconds("MINDIO_TEST_ACTION_TIME_LIMIT", 0, 0.05, 1800);
    return test_s > 0 ? ms(test_s) : static_cast<int>(limit_s * 1000);
}

int prelock_timeout_ms() { return ms(env_seconds("MINDIO_PRELOCK_TIMEOUT", 30, 0.05, 600)); }

int prelock_tries() { return static_cast<int>(env_int("MINDIO_PRELOCK_TRIES", 3, 1, 10)); }

ControllerConfig controller_config_from_env(int rank, int world_size) {
    ControllerConfig cfg;
    cfg.rank = rank;
    cfg.world_size = world_size;
    cfg.action_timeout_ms = action_time_limit_ms();
    cfg.cluster_wait_ms = static_cast<int>(env_int("MINDIO_WAIT_MINDX_TIME", 30, 1, 3600) * 1000);
    cfg.collect_ms = ms(env_seconds("MINDIO_FAULT_COLLECT_TIME", 0.5, 0, 60));
    cfg.register_timeout_ms = ms(env_seconds("MINDIO_REGISTER_TIMEOUT", 5, 0.1, 600));
    cfg.frame_timeout_ms = cfg.register_timeout_ms;
    cfg.prelock_timeout_ms = prelock_timeout_ms();
    cfg.prelock_tries = prelock_tries();
    cfg.arf_wait_ms = ms(env_seconds("MINDIO_ARF_WAIT_S", 600, 0.1, 3600));
    cfg.arf_wait_is_default = env_string("MINDIO_ARF_WAIT_S").empty();
    cfg.scale_out_wait_ms = ms(env_seconds("MINDIO_SCALE_OUT_WAIT_S", cfg.arf_wait_ms / 1000.0, 0.1, 3600));
    cfg.takeover_wait_ms = ms(env_seconds("MINDIO_TAKEOVER_WAIT_S", 10, 0.1, 3600));
    cfg.silence_limit_ms = ms(env_seconds("MINDIO_SILENCE_LIMIT_S", 60, 1, 3600));
    cfg.save_wait_ms = ms(env_seconds("MINDIO_SAVE_WAIT_S", 120, 0, 3600));
    cfg.slow.factor = env_number("MINDIO_SLOW_FACTOR", 1.5, 1.05, 100, "times the ranks' median");
    cfg.slow.window_steps = static_cast<int>(env_int("MINDIO_SLOW_WINDOW_STEPS", 10, 1, 100000));
    cfg.slow.windows = static_cast<int>(env_int("MINDIO_SLOW_WINDOWS", 3, 1, 1000));
    cfg.token = env_string("MINDIO_TOKEN");
    cfg.tls = tls_files_from_env();
    return cfg;
}

ProcessorConfig processor_config_from_env(int rank, int world_size) {
    ProcessorConfig cfg;
    cfg.rank = rank;
    cfg.world_size = world_size;
    cfg.heartbeat_ms = static_cast<uint32_t>(ms(env_seconds("MINDIO_HEARTBEAT_INTERVAL", 2, 0.05, 60)));
    cfg.retry_times = static_cast<int>(env_int("TTP_RETRY_TIMES", 10, 1, 300));
    cfg.handler_limit_ms = action_time_limit_ms();
    // A start_updating after PRELOCK waits for the STOP that follows the controller's wait for laggards.
    cfg.prelock_wait_ms = prelock_timeout_ms() * prelock_tries() + cfg.handler_limit_ms;
    cfg.restarted = env_int("MINDIO_RESTARTED", 0, 0, 1) == 1;
    cfg.majority_wait_ms = ms(env_seconds("MINDIO_TAKEOVER_WAIT_S", 10, 0.1, 3600));
    cfg.token = env_string("MINDIO_TOKEN");
    cfg.tls = tls_files_from_env();
    return cfg;
}

}  // namespace mindio
