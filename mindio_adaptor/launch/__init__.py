"""`mindio-adaptor launch` (also `python -m mindio_adaptor.launch`): a torchrun-compatible launcher, one per
node, that can restart only a failed worker (process replacement) instead of the whole group.

Starting and watching (one node):
    entry.py             main(): parse, meet the other nodes, run the agent
    args.py, config.py   the command line (torchrun's flags), the checked configuration; slurm.py: srun's
    agent.py             the watch loop of one node: follows the others' decisions, restarts the group
    worker_exits.py      what the launcher does when a worker's process ends, and a hot switch's hand-overs
    local_workers.py     the node's workers, what became of each, stopping them; the summary of a done node
    policy.py            the answer to a worker's exit (pure); restart_loop.py: a rank that keeps dying
    worker.py            a worker process, stopping workers; worker_env.py: a worker's environment
    worker_starts.py     starting a worker's process with the job's current lists (membership.py)
    warm_pool.py         warm workers handed to a rank; warm_worker.py: one such process
    hand_overs.py        a hot switch on the launcher's side, and a drained node
    log.py               one line per event, naming the node
The nodes together:
    node_store.py        the launchers' store and each generation's workers' store; store_keys.py: its keys
    node_ownership.py    a launcher's claim on its node rank and the evidence to take another's (beat, lifeline)
    node_liveness.py     beats and node rank ownership; lifeline.py: proof that a launcher's process is gone
    node0_loss.py        node 0's loss, all of it: the others' wait and rejoin, a standby taking node 0's place
    unreplaced_nodes.py  node 0 telling the controller a lost node will not come back
    repeat_offender.py   whether a node that failed too often may start
    job_token.py         the job's token, which seals the launchers' values
The recovery controllers:
    controllers.py       controllers hosted by the launchers (--controllers K)
    controller_report.py the messages a launcher sends them; job_controllers.py: which of them it tells

Nothing here is imported by the training processes; docs/launch.md tells the whole story.
"""
