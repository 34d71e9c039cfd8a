"""The job as every process finds it: its stores, controller address, link, TLS, HA config, hand-overs."""
