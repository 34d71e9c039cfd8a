"""The tiny GPT job on local processes, as the demo, `bench/` and the tests run it: one job under torchrun or
`mindio-adaptor launch` and what it printed (job), several launchers playing the nodes of one job (job's
LocalCluster), and elastic training on them (elastic)."""
