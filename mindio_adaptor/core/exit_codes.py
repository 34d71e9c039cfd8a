"""Exit codes a launcher must tell apart from a crash."""

# The recovery controller decided that the job ends (after a dying-gasp dump, or when nothing can be
# recovered): restarting this worker would only meet a controller that has finished. A launcher with
# worker reboot never restarts a worker that exits with it, nor any other worker after seeing it.
ENDED_BY_CONTROLLER = 86
