"""Connects the Megatron job to the recovery controller once Megatron's process groups exist.

With --enable-high-availability: the controller runs in the rank-0 process (the reference's default),
or outside the job when MINDIO_CONTROLLER_ADDR=host:port names one; every rank starts its processor,
reports the replica layout (tft_set_optimizer_replica) and brackets each optimizer update with
tft_start_updating_os / tft_end_updating_os, so the controller always knows the last step every
shard completed. The in-job controller's port and the job's token (the launcher's MINDIO_TOKEN, else a
fresh one) reach the ranks by one broadcast over Megatron's world group; a replacement reads the port from
the job's store (sealed) and has the token from its launcher.
"""
import atexit
import functools
import logging
import os
import secrets
import socket
import time

import torch.distributed as dist

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.detection import cut_off
from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER
from mindio_adaptor.core.detection.offender_record import OffenderRecord
from mindio_adaptor.core.job import job_store, processor_link, rehosted_slot
from mindio_adaptor.core.job.controller_address import CONTROLLER_FACTS, ENV_TOKEN, controller_addresses
from mindio_adaptor.core.job.paired_store import control_ports
from mindio_adaptor.core.layout import warm_assignment
from mindio_adaptor.core.process import inherited_sockets
from mindio_adaptor.core.process.env_values import seconds_from_env
from mindio_adaptor.core.steps import step_path_costs
from mindio_adaptor.core.steps.step_path_costs import COSTS
from mindio_adaptor.patches import client_loop, exception_loop, interrupted_save, parallel_state
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery import fault_handling, flows
from mindio_adaptor.recovery.session import SESSION
from mindio_adaptor.status.goodput import goodput_line
from mindio_adaptor.status.offender_watch import OffenderWatch
from mindio_adaptor.status.sub_health_responder import SubHealthResponder

logger = logging.getLogger(__name__)
_event_watches = []  # on rank 0, beside the in-job controller: what follows its events
_events_polled = [0]  # how many of its events the watches have read

FINISH_WAIT_ENV = "MINDIO_FINISH_WAIT_S"
DEFAULT_FINISH_WAIT_S = 10.0


def _after_initialize(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if not SESSION.config.enable_high_availability:
        return result
    fault_handling.put_in_force()
    if not warm_assignment.provisional():  # a warm spare connects once it has its rank (patches/warm_spare)
        connect_after_initialize()
    return result


def connect_after_initialize():
    if fault_handling.client_handles_faults():
        client_loop.prepare(megatron_job.args(), _take_snapshot)  # the client connects later (recovery/fault_handling)
    else:
        connect()


def connect():
    from mindio_adaptor.ttp import controller

    rank, world = dist.get_rank(), dist.get_world_size()
    margs = megatron_job.args()
    config = SESSION.config
    addresses = controller_addresses() or [_start_in_job_controller(rank, world, controller, config)]
    address = addresses[0]
    link = processor_link.open_link(rank, world, allow_replacement=config.enable_worker_reboot)
    if rehosted_slot.announce() is not None:  # before registering: the survivors read it when this rank joins
        logger.info("this node hosts slot %s of the controllers again (a replaced node): announced in the job's "
                    "stores", rehosted_slot.rehosted_slot())
    start_or_end_with_the_job(link, address, addresses[1:])
    if len(addresses) > 1:  # only a backup can find this rank in a minority (docs/controller.md)
        cut_off.leave_when_cut_off(link, f"rank {rank}")
    if SESSION.job.layout is not None:
        link.report_layout(rank, SESSION.job.layout.to_reference(), parallel_state.failure_domain(rank))
    # The bracket opens right before the in-place update (after the gradient-norm collective) and
    # closes when the step's state is final (scheduler stepped too), only after the step's snapshot
    # exists: every step the controller believes complete can be dumped or repaired from.
    SESSION.job.before_update.append(COSTS.timed("update brackets", lambda step: link.update_started(step - 1)))
    SESSION.job.step_completed.extend([COSTS.timed("snapshot", _take_snapshot),
                                       COSTS.timed("update brackets", link.update_ended),
                                       lambda step: COSTS.step_completed(lambda: _step_path_counters(link))])
    SESSION.job.decided.append(functools.partial(interrupted_save.remove_after_decision, margs.save))
    inherited_sockets.install()
    exception_loop.arm(margs, link)
    SESSION.save_root = margs.save
    SESSION.thread.use_backend(margs.distributed_backend)  # not dist.get_backend(): "fake" in a replacement
    SESSION.thread.keep_ports = control_ports(also=[address[1]])
    flows.answer_actions(SESSION, link)
    atexit.register(disconnect)
    if rank == 0:
        logger.info("processors of %d ranks connected to the controller at %s:%d", world, *address)


def start_or_end_with_the_job(link, address, backups) -> None:
    """Register with the controller. A restarted process refused because the controller is ending the job ends
    now with the job's exit code: an error exit would have its launcher start it again and again, and once its
    restarts ran out restart the group of a job that is ending."""
    try:
        link.start(*address, backups=backups)
    except processor_link.JobEnding as refusal:
        logger.error("%s; exiting with code %d (ENDED_BY_CONTROLLER): the job ends", refusal, ENDED_BY_CONTROLLER)
        raise SystemExit(ENDED_BY_CONTROLLER) from None


def _take_snapshot(step: int) -> None:
    """What a checkpoint of the step just completed needs beyond model and optimizer: the controller
    learns that the step completed only after this exists, so every step it may dump has one (a client's
    too: patches/client_loop)."""
    SESSION.latest = megatron_job.snapshot_of_completed_step(step)


def _start_in_job_controller(rank, world, controller, config):
    """Rank 0 hosts the controller; its port and the token reach the others by a broadcast, and a
    replacement process (which cannot take part in collectives yet) has the token from its launcher and
    the port through the job's store."""
    host = socket.gethostbyname(os.environ.get("MASTER_ADDR", "127.0.0.1"))
    shared = [None, None]
    if SESSION.replacement.fake_world:
        return host, job_store.read(CONTROLLER_FACTS)
    if rank == 0:
        token_chosen_by_user = bool(os.environ.get(ENV_TOKEN))
        os.environ.setdefault(ENV_TOKEN, secrets.token_hex(16))
        controller.tft_init_controller(0, world, enable_arf=config.enable_worker_reboot,
                                       enable_uce=config.enable_hbmfault_repair,
                                       enable_scale_in=config.enable_elastic_training)
        shared = [controller.tft_start_controller(host, 0, enable_tls=False), os.environ[ENV_TOKEN]]
        _publish_contact(shared[0], needed=config.enable_worker_reboot)
        _start_status_page(announce_token=not token_chosen_by_user)
        _watch_events(controller)
    dist.broadcast_object_list(shared, src=0)
    port, token = shared
    os.environ[ENV_TOKEN] = token
    return host, port


def _start_status_page(announce_token: bool) -> None:
    """MINDIO_STATUS_PORT asks for the controller's status page and /metrics. Its requests need the job's
    token: one the user chose (MINDIO_TOKEN) they know; one the job made is written to a file only this
    user can read, whose path (never the token: logs are copied and shared) the log names once."""
    from mindio_adaptor.status.controller_source import start_if_asked, write_token_file

    SESSION.status_server = start_if_asked()
    if SESSION.status_server is not None and announce_token:
        logger.info("status page at http://%s:%d/: the token this job made is in %s (readable by you only)",
                    *SESSION.status_server.address, write_token_file(os.environ[ENV_TOKEN]))


def _watch_events(controller) -> None:
    """Rank 0's controller keeps the record of the nodes that caused faults (status/offender_watch) and acts on
    sub-health signals by policy (status/sub_health_responder): its events are read after every completed step
    and when the job ends."""
    responder = SubHealthResponder.from_env(controller)
    offenders = OffenderWatch(OffenderRecord.from_env(), controller.controller_events, controller.controller_ranks,
                              on_offender=responder.offender)
    offenders.say_remembered()
    _event_watches[:] = [offenders, responder]
    SESSION.job.step_completed.append(COSTS.timed("event watches", lambda step: _poll_new_events(controller)))


def _poll_new_events(controller) -> None:
    """The watches read every event and every rank's entry: at each step only when there are new events (a healthy
    job's steps add none), so the step does not pay for a copy that grows with the job's world and history."""
    count = controller.controller_event_count()
    if count != _events_polled[0]:
        _events_polled[0] = count
        _poll_event_watches()


def _poll_event_watches() -> None:
    for watch in _event_watches:
        watch.poll()


def _publish_contact(port: int, needed: bool) -> None:
    """A replacement process needs the controller's port (worker reboot); a launcher uses it to report
    a worker whose process ended. Without a job store only the latter is lost, and that is said once."""
    try:
        job_store.publish(CONTROLLER_FACTS, port)
    except job_store.JobStoreError as err:
        if needed:
            raise
        logger.info("the controller's contact is not published (%s): a launcher cannot report ended "
                    "processes, the controller sees deaths as closed connections only", err)


def _step_path_counters(link) -> dict:
    return {**link.counters(), "background CPU ms": step_path_costs.background_cpu_ms()}


def disconnect():
    from mindio_adaptor.ttp import controller

    for hook in list(SESSION.job.before_leaving):
        hook()
    link = processor_link.current_or_none()
    said = COSTS.line(_step_path_counters(link)) if link is not None else None
    if said:
        logger.info("%s", said)
    processor_link.close_link()
    if controller.tft_query_high_availability_switch():
        if SESSION.job.training_finished:
            _await_the_others_leaving(controller)
        if SESSION.status_server is not None:
            SESSION.status_server.stop()
        _poll_event_watches()
        stats = controller.controller_stats()
        logger.info("controller at exit: state %s, %s", controller.controller_state(),
                    ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
        logger.info("controller at exit: %s", goodput_line(controller.controller_goodput()))
        controller.tft_destroy_controller()


def _await_the_others_leaving(controller) -> None:
    """A finished job's controller stays until every rank has left or is lost (bounded), so that a rank
    lost while the processes exit is seen, and logged as a fault after the end, not acted on."""
    limit = seconds_from_env(FINISH_WAIT_ENV, DEFAULT_FINISH_WAIT_S, 0, 600)
    deadline = time.monotonic() + limit
    while True:
        running = [rank for rank, entry in enumerate(controller.controller_ranks())
                   if not {"left", "dead"} & set(entry["flags"])]
        if not running or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if running:
        logger.warning("ranks %s neither left nor were lost within %.0f s of the end (%s): stopping the "
                       "controller", running, limit, FINISH_WAIT_ENV)


PATCHES = [
    Patch("megatron.training.initialize", "initialize_megatron", _after_initialize),
]
