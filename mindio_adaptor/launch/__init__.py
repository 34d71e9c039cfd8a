"""`mindio-adaptor launch` (also `python -m mindio_adaptor.launch`): a torchrun-compatible launcher, one per
node, that can restart only a failed worker (process replacement) instead of the whole group.

    config.py       the checked configuration      args.py        the command line (torchrun's flags)
    worker_env.py   a worker's environment         worker.py      a worker process, stopping workers
    policy.py       the answer to a worker's exit  node_store.py  the stores node 0's launcher hosts
    agent.py        the watch loop of one node     entry.py       main()

Nothing here is imported by the training processes; docs/launch.md tells the whole story.
"""
