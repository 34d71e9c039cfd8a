// Controller and processor settings from the environment, validated with clear errors.
//
//   TTP_NORMAL_ACTION_TIME_LIMIT   seconds a handler may take, 30..1800 (default 180)
//   MINDIO_TEST_ACTION_TIME_LIMIT  testing only: seconds, 0.05..1800, replaces the limit above so
//                                  tests can time out quickly; never set it in production
//   MINDIO_HEARTBEAT_INTERVAL      processor heartbeat period in seconds, 0.05..60 (default 2)
//   TTP_RETRY_TIMES                connection attempts, 1..300 (default 10)
//   MINDIO_WAIT_MINDX_TIME         seconds to wait for the cluster manager's strategy, 1..3600 (30)
//   MINDIO_FAULT_COLLECT_TIME      seconds to gather related faults before deciding, 0..60 (0.5)
//   MINDIO_REGISTER_TIMEOUT        seconds a new connection has to register, 0.1..600 (5)
//   MINDIO_TOKEN                   shared secret every processor must present
//   MINDIO_ARF_WAIT_S              seconds the controller waits for a restarted process to replace a
//                                  dead rank and report ready (ARF), 0.1..3600 (default 600)
//   MINDIO_SCALE_OUT_WAIT_S        seconds a scaled-in job waits, from the first return, for every rank the
//                                  scale-in retired to return and be ready before it sends the returned
//                                  ones away, 0.1..3600 (default: MINDIO_ARF_WAIT_S)
//   MINDIO_TAKEOVER_WAIT_S         seconds a backup that took over waits for the other ranks to register
//                                  after the first; those that do not are dead, 0.1..3600 (default 10:
//                                  twice the 5 s a processor's failed connect to a lost node may take).
//                                  Also how long an idle backup holds a registration while it waits for a
//                                  majority, and a processor waits for that backup's answer (plus its
//                                  5 s I/O timeout)
//   MINDIO_SILENCE_LIMIT_S         seconds a rank with an open connection may stay silent before it is
//                                  judged hung whatever it was doing, 1..3600 (default 60)
//   MINDIO_SAVE_WAIT_S             longest a fault's handling waits for a checkpoint save in progress
//                                  to finish before stopping the ranks, 0..3600 (default 120)
//   MINDIO_RESTARTED               1 in a process the launcher started again for a dead rank (ARF), else
//                                  0 or unset; it registers as a replacement (tft_is_reboot_node)
#pragma once
#include "controller/controller.h"
#include "processor/processor.h"

namespace mindio {

int action_time_limit_ms();
ControllerConfig controller_config_from_env(int rank, int world_size);
// MINDIO_PRELOCK_TIMEOUT (s, 30, range 0.05-600) x MINDIO_PRELOCK_TRIES (3, range 1-10).
int prelock_timeout_ms();
int prelock_tries();
ProcessorConfig processor_config_from_env(int rank, int world_size);

}  // namespace mindio
