"""`mindio-adaptor launch` with real processes: worker reboot restarts only the killed rank (which joins a new
gloo group with the survivors), torchrun mode restarts the whole group and fails past --max-restarts, an
ENDED_BY_CONTROLLER exit is never restarted, nor a LEFT_THE_JOB one, which ends no job, two launchers form one world, bad arguments are named.
The workers are tests/integration/launch_worker.py (no Megatron)."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, LEFT_THE_JOB

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORKER = str(HERE / "launch_worker.py")
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p))
LAUNCH = [sys.executable, "-m", "mindio_adaptor.launch"]
TIMEOUT_S = 90


def launch(*argv):
    return subprocess.run([*LAUNCH, *argv], env=ENV, capture_output=True, text=True, timeout=TIMEOUT_S)


def events(out, rank, event):
    """What rank's processes recorded (launch_worker.record), in order, for one kind of event."""
    path = Path(out) / f"rank{rank}.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["event"] == event]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_worker_reboot_restarts_only_the_killed_rank(tmp_path):
    done = launch("--nproc-per-node", "3", "--worker-reboot", "--max-restarts", "1",
                  WORKER, "reboot", str(tmp_path), "1")
    assert done.returncode == 0, done.stderr
    for survivor in (0, 2):  # one process each, left alone, in the new group with the restarted rank
        (start,) = events(tmp_path, survivor, "start")
        assert start["env"]["MINDIO_RESTARTED"] == "0"
        assert [r["pid"] for r in events(tmp_path, survivor, "epoch1")] == [start["pid"]]
    first, again = events(tmp_path, 1, "start")
    assert first["pid"] != again["pid"]
    assert (again["env"]["RANK"], again["env"]["LOCAL_RANK"], again["env"]["MINDIO_RESTARTED"],
            again["env"]["TORCHELASTIC_RESTART_COUNT"]) == ("1", "1", "1", "1")
    assert again["env"]["MASTER_PORT"] == first["env"]["MASTER_PORT"]  # the survivors' store
    assert first["env"]["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    assert [r["sum"] for rank in range(3) for r in events(tmp_path, rank, "epoch1")] == [3, 3, 3]
    assert events(tmp_path, 1, "epoch1")[0]["pid"] == again["pid"]
    log = done.stderr
    assert f"rank 1 (local rank 1, pid {first['pid']}) ended: signal SIGKILL; worker reboot: rank 1 started " \
           f"again alone as pid {again['pid']}" in log
    assert "restarts per rank: rank 0: 0, rank 1: 1, rank 2: 0" in log
    assert all(line.startswith("[mindio-launch ") and " node 0] " in line for line in log.splitlines()
               if line.startswith("[mindio-launch"))


def test_a_warm_spare_worker_replaces_the_killed_rank(tmp_path):
    done = launch("--nproc-per-node", "2", "--worker-reboot", "--spare-workers", "1", "--warm-preload", "torch",
                  "--warm-refill-delay", "0", WORKER, "reboot", str(tmp_path), "1", "--extra", "x y")
    assert done.returncode == 0, done.stderr
    spares = [int(pid) for pid in re.findall(r"warm spare workers started: pids \[(\d+)\]", done.stderr)]
    assert len(spares) == 2, done.stderr  # one at the start, one to refill the pool after the hand-out
    first, again = events(tmp_path, 1, "start")
    assert again["pid"] == spares[0] and again["argv"] == ["--extra", "x y"]
    assert (again["env"]["RANK"], again["env"]["LOCAL_RANK"], again["env"]["MINDIO_RESTARTED"]) == ("1", "1", "1")
    assert again["env"]["MASTER_PORT"] == first["env"]["MASTER_PORT"]
    assert [r["sum"] for rank in range(2) for r in events(tmp_path, rank, "epoch1")] == [1, 1]
    assert f"worker reboot: rank 1 started again alone as pid {spares[0]}, a warm spare" in done.stderr
    assert not psutil.pid_exists(spares[1]) or psutil.Process(spares[1]).status() == psutil.STATUS_ZOMBIE


def test_torchrun_mode_restarts_the_group_then_fails(tmp_path):
    done = launch("--nproc-per-node", "2", "--max-restarts", "1", "--shutdown-timeout", "5",
                  WORKER, "fail", str(tmp_path), "1")
    assert done.returncode == 1, done.stderr
    for rank in (0, 1):  # the whole group started twice; each generation formed its gloo group on a new store
        starts = events(tmp_path, rank, "start")
        assert [s["env"]["TORCHELASTIC_RESTART_COUNT"] for s in starts] == ["0", "1"]
        assert [s["env"]["MINDIO_RESTARTED"] for s in starts] == ["0", "0"]
        assert len({s["pid"] for s in starts}) == 2
        assert [r["sum"] for r in events(tmp_path, rank, "round")] == [1, 1]
    assert starts[0]["env"]["MASTER_PORT"] != starts[1]["env"]["MASTER_PORT"]
    last = events(tmp_path, 1, "start")[-1]["pid"]
    assert f"summary: job failed: rank 1 (local rank 1, pid {last}) ended: exit code 3; no restarts left " \
           f"(--max-restarts 1)" in done.stderr
    assert "restarting the whole group (group restart 1 of 1)" in done.stderr
    assert "stopped 1 local worker (group restart): rank 0 signal SIGTERM" in done.stderr


def test_ended_by_controller_is_never_restarted(tmp_path):
    # Worker reboot comes from the training script's own flag here.
    done = launch("--nproc-per-node", "2", "--max-restarts", "2", WORKER, "ended", str(tmp_path), "1",
                  "--enable-worker-reboot")
    assert done.returncode == ENDED_BY_CONTROLLER, done.stderr
    assert "worker reboot on (the training script was given --enable-worker-reboot)" in done.stderr
    assert [len(events(tmp_path, rank, "start")) for rank in (0, 1)] == [1, 1]
    assert "exit code 86 (ENDED_BY_CONTROLLER): the recovery controller ended the job" in done.stderr
    assert "ended: exit code 1; not restarted: the recovery controller ended the job" in done.stderr


def two_nodes(scenario, out, order, run_id):
    """Two launchers of one worker each (worker reboot, one restart), started in `order`, both ending 0; their
    logs in node order."""
    common = ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", run_id,
              "--worker-reboot", "--max-restarts", "1"]
    nodes = {r: subprocess.Popen([*LAUNCH, *common, "--node-rank", str(r), WORKER, scenario, str(out), "1"],
                                 env=ENV, stderr=subprocess.PIPE, text=True) for r in order}
    logs = [nodes[r].communicate(timeout=TIMEOUT_S)[1] for r in (0, 1)]
    # the whole of both logs on a failure (pytest would shorten a list's repr to its two ends)
    assert [nodes[r].returncode for r in (0, 1)] == [0, 0], "\n".join(f"node {r}:\n{log}" for r, log in enumerate(logs))
    return logs


def test_a_rank_that_left_the_job_is_not_restarted_and_the_job_goes_on(tmp_path):
    """Rank 1, alone on node 1, exits LEFT_THE_JOB (a scale-in dropped its data-parallel slice): its launcher
    neither starts it again nor ends the job; it ends 0 with the node's part done, while node 0's rank trains
    on and ends the job normally."""
    logs = two_nodes("dropped", tmp_path, order=(0, 1), run_id="dropped")
    assert [len(events(tmp_path, rank, "start")) for rank in (0, 1)] == [1, 1], logs
    assert len(events(tmp_path, 0, "went_on")) == 1 and not events(tmp_path, 1, "went_on")
    (pid,) = [r["pid"] for r in events(tmp_path, 1, "start")]
    assert (f"rank 1 (local rank 0, pid {pid}) ended: exit code {LEFT_THE_JOB} (LEFT_THE_JOB): it left the job, "
            f"which goes on without it (a scale-in dropped its data-parallel slice); not restarted") in logs[1]
    assert ("summary: no local worker exited 0; ranks [1] left the job, which went on without them (elastic "
            "training); exit code 0") in logs[1]
    assert "told the recovery controller" not in logs[1]  # the controller retired it before it exited
    assert "summary: 1 local worker exited 0; exit code 0" in logs[0]
    assert "the job ends" not in logs[0] + logs[1]


def test_a_node_whose_workers_all_left_ends_without_waiting_for_the_job(tmp_path):
    """Node 1 hosts a backup controller (--controllers 2), and its only worker leaves the job: its launcher
    ends at once, its controller with it, while node 0's worker trains on; a node hosting a controller
    otherwise waits for every node at the end. (Its node rank is then free for a new launcher: the
    scale-out's return, tests/e2e/test_elastic_scale_in.py.)"""
    common = ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "dropped-hosting",
              "--worker-reboot", "--max-restarts", "1", "--controllers", "2"]
    release = tmp_path / "node_1_ended"  # node 0's worker trains on until node 1's launcher ended
    env = dict(ENV, WENT_ON_WHEN_FILE=str(release))
    nodes = [subprocess.Popen([*LAUNCH, *common, "--node-rank", str(r), WORKER, "dropped", str(tmp_path), "1"],
                              env=env, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        node_1 = nodes[1].communicate(timeout=TIMEOUT_S)[1]
        assert nodes[1].returncode == 0, node_1
        assert not events(tmp_path, 0, "went_on") and nodes[0].poll() is None  # the job goes on without node 1
        release.touch()
        node_0 = nodes[0].communicate(timeout=TIMEOUT_S)[1]
    finally:
        for node in nodes:
            node.kill() if node.poll() is None else None
    assert "summary: no local worker exited 0; ranks [1] left the job" in node_1
    assert re.search(r"node 1\] backup controller started as pid \d+", node_1), node_1
    assert "every worker of this node left the job, which goes on: the node ends now, not at the job's end, and " \
           "its controller with it" in node_1
    assert "stopped waiting for the other nodes" not in node_1
    assert nodes[0].returncode == 0 and len(events(tmp_path, 0, "went_on")) == 1, node_0


def external_controller(world_size):
    """A controller in this process, and the workers' environment that finds it (with its token)."""
    from mindio_adaptor.ttp import controller as ctl

    token = "launcher-report-test"
    env = dict(ENV, MINDIO_TOKEN=token, MINDIO_HEARTBEAT_INTERVAL="0.2")
    ctl_env = os.environ.get("MINDIO_TOKEN")
    os.environ["MINDIO_TOKEN"] = token  # the controller reads its token at init
    try:
        ctl.tft_init_controller(-1, world_size)
    finally:
        os.environ.pop("MINDIO_TOKEN") if ctl_env is None else os.environ.update(MINDIO_TOKEN=ctl_env)
    port = ctl.tft_start_controller("127.0.0.1", 0, enable_tls=False)
    env["MINDIO_CONTROLLER_ADDR"] = f"127.0.0.1:{port}"
    return ctl, env


def test_a_rank_that_fails_after_leaving_the_job_is_not_restarted(tmp_path):
    """Rank 1's training is over (it said goodbye), then its process aborts on its way out: the controller
    answers the launcher's report that it had left, and worker reboot does not start it again."""
    ctl, env = external_controller(2)
    try:
        done = subprocess.run([*LAUNCH, "--nproc-per-node", "2", "--max-restarts", "2", "--worker-reboot",
                               WORKER, "left", str(tmp_path), "1"], env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    finally:
        ctl.tft_destroy_controller()
    assert done.returncode == 0, done.stderr
    assert [len(events(tmp_path, rank, "start")) for rank in (0, 1)] == [1, 1], done.stderr
    (pid,) = [r["pid"] for r in events(tmp_path, 1, "start")]
    assert (f"rank 1: told the recovery controller that pid {pid} ended: rank 1 had left the job before process "
            f"{pid} (signal SIGABRT) ended: nothing to restart") in done.stderr
    assert "ended: signal SIGABRT after it had left the job (its training was over): not restarted" in done.stderr
    assert "summary: 1 local worker exited 0; after leaving the job: rank 1 signal SIGABRT; exit code 0" in done.stderr


def test_launcher_reports_a_death_its_connection_hides(tmp_path):
    """Rank 1 dies while a helper outside its process group holds its controller connection open: only
    its launcher's report tells the controller; the helper left in its process group is ended."""
    ctl, env = external_controller(2)
    try:
        done = subprocess.run([*LAUNCH, "--nproc-per-node", "2", "--max-restarts", "0", "--shutdown-timeout", "5",
                               WORKER, "held", str(tmp_path), "1"], env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        events_seen = ctl.controller_events()
    finally:
        ctl.tft_destroy_controller()
        holder = int((tmp_path / "holder.pid").read_text()) if (tmp_path / "holder.pid").exists() else None
        holder_alive = holder is not None and _alive(holder)
        if holder_alive:
            os.kill(holder, signal.SIGKILL)
    assert done.returncode == 1, done.stderr
    assert holder_alive, "the helper holding rank 1's connection should have outlived the job"
    (died,) = [r["pid"] for r in events(tmp_path, 1, "start")]
    assert len(events(tmp_path, 1, "registered")) == 1
    dead = [d for _, kind, d in events_seen if kind == "dead" and d.startswith("rank 1:")]
    assert dead == [f"rank 1: process {died} (signal SIGKILL) ended, reported by its launcher"], events_seen
    assert f"rank 1: told the recovery controller that pid {died} ended: rank 1 declared dead" in done.stderr
    helper = int((tmp_path / "helper.pid").read_text())
    assert f"rank 1: ended what its process left running in its process group: pids [{helper}]" in done.stderr
    assert not _alive(helper)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (ended, not yet reaped by init) is not alive
        return f.read().split(") ")[-1][0] != "Z"


def test_two_launchers_form_one_world_and_reboot_across_nodes(tmp_path):
    logs = two_nodes("reboot", tmp_path, order=(1, 0), run_id="two-nodes")
    zero, one = events(tmp_path, 0, "start"), events(tmp_path, 1, "start")
    assert len(zero) == 1 and len(one) == 2
    assert [(s["env"]["GROUP_RANK"], s["env"]["WORLD_SIZE"], s["env"]["TORCHELASTIC_RUN_ID"]) for s in zero + one] \
        == [("0", "2", "two-nodes"), ("1", "2", "two-nodes"), ("1", "2", "two-nodes")]
    assert len({s["env"]["MASTER_PORT"] for s in zero + one}) == 1  # node 0 hosts the workers' store
    assert one[1]["env"]["MINDIO_RESTARTED"] == "1"
    # each launcher is its own failure domain, though both run on this host
    domains = [s["env"]["MINDIO_FAILURE_DOMAIN"] for s in zero + one]
    assert domains[0].endswith("/node0") and domains[1] == domains[2] and domains[1].endswith("/node1")
    assert [r["sum"] for rank in (0, 1) for r in events(tmp_path, rank, "epoch1")] == [1, 1]
    assert "worker reboot: rank 1 started again alone" in logs[1] and "node 1]" in logs[1]


def test_sigterm_is_passed_to_the_workers(tmp_path):
    # Workers without torch (a shell that records its pid, then sleeps): only the launcher imports torch.
    record = f'echo $$ > {tmp_path}/pid$RANK; exec sleep 60'
    launcher = subprocess.Popen([*LAUNCH, "--nproc-per-node", "2", "--no-python", "bash", "-c", record],
                                env=ENV, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + TIMEOUT_S
    while not all((tmp_path / f"pid{r}").exists() for r in (0, 1)) and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)]
    launcher.send_signal(signal.SIGTERM)
    log = launcher.communicate(timeout=TIMEOUT_S)[1]
    assert launcher.returncode == 128 + signal.SIGTERM, log
    assert "stopped 2 local workers (received SIGTERM): rank 0 signal SIGTERM, rank 1 signal SIGTERM" in log
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize("argv, message", [
    (["--nnodes", "2", "--node-rank", "2", WORKER], "--node-rank 2 is out of range"),
    (["/no/such/script.py"], "training script '/no/such/script.py' not found"),
    (["--master-addr", "a", "--rdzv-endpoint", "b:1", WORKER], "--rdzv-endpoint and --master-addr both say"),
    (["--rdzv-endpoint", "b:port", WORKER], "--rdzv-endpoint 'b:port' is malformed"),
])
def test_bad_arguments(argv, message):
    done = launch(*argv)
    assert done.returncode == 2
    assert f"python -m mindio_adaptor.launch: error: {message}" in done.stderr
