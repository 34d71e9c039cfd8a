"""The environment of one worker: torchrun's variables, plus MINDIO_RESTARTED for a process started again
alone (process replacement), MINDIO_FAILURE_DOMAIN, the node it runs on as the replica layout sees it, and
MINDIO_TOKEN, the job's token (launch/job_token): the environment is how it reaches the workers, never a
store."""
from __future__ import annotations

import os
import socket
from typing import Dict, Mapping

from mindio_adaptor.core.job.controller_address import ENV_TOKEN
from mindio_adaptor.launch.config import LaunchConfig

ENV_RESTARTED = "MINDIO_RESTARTED"  # read by mindio_adaptor.ttp.processor (tft_is_reboot_node)
# Read by patches/parallel_state: the holders of a shard are spread over domains. Each launcher is a
# node, so its workers share one domain, also where several launchers play a cluster on one host.
# A domain given to the launcher (a rack, say) is passed on as it is.
ENV_FAILURE_DOMAIN = "MINDIO_FAILURE_DOMAIN"


def failure_domain(config: LaunchConfig, base: Mapping[str, str]) -> str:
    """The node as the replica layout and the offender record name it: MINDIO_FAILURE_DOMAIN when set."""
    return base.get(ENV_FAILURE_DOMAIN) or f"{socket.gethostname()}/node{config.node_rank}"


def worker_env(config: LaunchConfig, local_rank: int, master_port: int, restart_count: int, restarted: bool,
               token: str, base: Mapping[str, str] = os.environ, extra: Mapping[str, str] = {}) -> Dict[str, str]:
    """`master_port` is the port of the current generation's worker store (not --master-port: that one is the
    launchers' store). TORCHELASTIC_USE_AGENT_STORE=True tells torch's env:// rendezvous that the store is
    hosted by the launcher, so every worker connects as a client and none of them takes it down by dying."""
    rank = config.global_rank(local_rank)
    env = dict(base)
    env.update({
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(config.world_size),
        "LOCAL_WORLD_SIZE": str(config.nproc_per_node),
        "GROUP_RANK": str(config.node_rank),
        "GROUP_WORLD_SIZE": str(config.nnodes),
        "ROLE_NAME": config.role,
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(config.world_size),
        "MASTER_ADDR": config.master_addr,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(config.max_restarts),
        "TORCHELASTIC_RUN_ID": config.run_id,
        "TORCHELASTIC_USE_AGENT_STORE": str(True),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        # Set in both cases: a launcher started from inside a restarted worker must not pass it on.
        ENV_RESTARTED: "1" if restarted else "0",
        ENV_FAILURE_DOMAIN: failure_domain(config, base),
        ENV_TOKEN: token,
    })
    env.update(extra)  # the controllers hosted by the launchers (launch/controllers)
    if "OMP_NUM_THREADS" not in base and config.nproc_per_node > 1:
        env["OMP_NUM_THREADS"] = "1"  # torchrun's default: N workers of all cores each overload the node
    return env
