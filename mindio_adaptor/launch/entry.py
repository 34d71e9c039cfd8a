"""Run the launcher: parse, meet the other nodes, watch the workers, return the exit code."""
from __future__ import annotations

from typing import List, Optional

from mindio_adaptor.launch.args import PROG, build_parser, config_from_args
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.log import configure


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    parser = build_parser(prog)
    return run(*config_from_args(parser.parse_args(argv), parser))


def run(config: LaunchConfig, token: str) -> int:
    # torch is imported only now: a bad command line was answered without it.
    from mindio_adaptor.launch import repeat_offender
    from mindio_adaptor.launch.node_store import NodeStore
    from mindio_adaptor.launch.warm_pool import WarmPool

    log = configure("standby" if config.standby else config.node_rank)
    if not config.standby and repeat_offender.refused(config, log):
        return 1
    store = NodeStore(config, token)
    # A standby's workers wait warm for the node it will replace; a node keeps --spare-workers of them.
    warm = WarmPool(config, config.nproc_per_node if config.standby else config.spare_workers)
    template = _worker_template(config, log)
    try:
        return _join_and_run(config, store, log, warm, template)
    finally:
        if template is not None:
            template.close()


def _worker_template(config: LaunchConfig, log):
    """The template the workers are forked from (--fork-workers), started now: its imports overlap the
    rendezvous. None without the flag, for a standby (its warm workers are its workers) and for a program
    that is not a Python script."""
    from mindio_adaptor.launch.forked_workers import WorkerTemplate, script_argv
    from mindio_adaptor.launch.warm_pool import preloading_env
    from mindio_adaptor.launch.worker_template import DEFAULT_PRELOAD

    if not config.fork_workers or config.standby:
        return None
    if script_argv(config.command) is None:
        log.info("--fork-workers: not for a program started without Python; its workers start as new processes")
        return None
    template = WorkerTemplate(DEFAULT_PRELOAD, preloading_env(config))
    log.info("workers are forked from a template process (pid %d) importing %s", template.proc.pid, DEFAULT_PRELOAD)
    return template


def _join_and_run(config: LaunchConfig, store, log, warm, template) -> int:
    from mindio_adaptor.launch.agent import NodeAgent
    from mindio_adaptor.launch.node_store import NodeStoreError

    try:
        if config.standby:
            log.info("standby for a job of %d nodes of %d workers, job id %s, launchers' store at %s:%d; warm "
                     "workers %s; command: %s", config.nnodes, config.nproc_per_node, config.run_id,
                     config.master_addr, store.port, warm.fill() or "none (not a Python script)",
                     " ".join(config.command))
            if store.join_as_standby(log) is None:
                warm.close()
                log.info("summary: the job ended without losing a node; this standby was not needed; exit code 0")
                return 0
            log = configure(config.node_rank)
        else:
            _log_place(config, store, log)
            store.join()
    except NodeStoreError as err:
        warm.close()
        log.info("error: %s", err)
        return 1
    ownership = store.ownership
    if ownership.replacing:
        log.info("node %d was lost: this launcher takes its place in the running job (incarnation %d); its "
                 "workers start as replacements (the node counted as lost because %s)", config.node_rank,
                 ownership.incarnation, ownership.lost_evidence)
    return NodeAgent(config, store, log, warm, template).run()


def _log_place(config: LaunchConfig, store, log) -> None:
    first, last = config.global_rank(0), config.global_rank(config.nproc_per_node - 1)
    log.info("node %d of %d%s: ranks %d..%d of %d, job id %s, launchers' store at %s:%d, max restarts %d, "
             "worker reboot %s; command: %s", config.node_rank, config.nnodes,
             f" (from {config.place_source})" if config.place_source else "", first, last, config.world_size,
             config.run_id, config.master_addr, store.port, config.max_restarts,
             f"on ({config.worker_reboot_reason})" if config.worker_reboot else "off", " ".join(config.command))
    if config.controllers_reason:
        log.info("the recovery controllers run in the launchers of nodes 0..%d (%s)", config.controllers - 1,
                 config.controllers_reason)
