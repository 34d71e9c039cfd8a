"""`mindio-adaptor launch`'s command line: torchrun's flags, the defaults, worker-reboot detection, the
errors, and the decisions on a worker's exit. No processes."""
import sys

import pytest

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, LEFT_THE_JOB, describe
from mindio_adaptor.launch.args import build_parser
from mindio_adaptor.launch.config import LaunchConfigError, resolve
from mindio_adaptor.launch.policy import Verdict, on_exit
from mindio_adaptor.launch.slurm import first_host
from mindio_adaptor.launch.worker_env import worker_env


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("")
    return str(path)


@pytest.fixture(autouse=True)
def no_env_defaults(monkeypatch):
    for key in ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NPROC_PER_NODE",
                "PET_MAX_RESTARTS", "PET_CONTROLLERS", "HIGH_AVAILABILITY", "MINDIO_FAILURE_DOMAIN"):
        monkeypatch.delenv(key, raising=False)


def config(*argv, environ=None):
    return resolve(build_parser().parse_args(list(argv)), environ or {})


def error(*argv, environ=None):
    with pytest.raises(LaunchConfigError) as info:
        config(*argv, environ=environ)
    return str(info.value)


def test_defaults_one_node(script):
    cfg = config(script, "--lr", "1")
    assert (cfg.nnodes, cfg.nproc_per_node, cfg.node_rank, cfg.world_size) == (1, 1, 0, 1)
    assert (cfg.master_addr, cfg.master_port, cfg.run_id) == ("127.0.0.1", 0, "none")  # 0: a free port
    assert (cfg.max_restarts, cfg.worker_reboot, cfg.monitor_interval) == (0, False, 0.1)
    assert cfg.command == [sys.executable, "-u", script, "--lr", "1"]


def test_torchrun_spellings_and_multi_node(script):
    cfg = config("--nnodes", "2:2", "--nproc_per_node", "4", "--node_rank", "1", "--master_addr", "node0",
                 "--master_port", "1234", "--max_restarts", "3", "--monitor_interval", "0.5", "--rdzv_id", "job7",
                 script)
    assert (cfg.nnodes, cfg.nproc_per_node, cfg.node_rank, cfg.world_size) == (2, 4, 1, 8)
    assert (cfg.master_addr, cfg.master_port, cfg.run_id, cfg.max_restarts) == ("node0", 1234, "job7", 3)
    assert [cfg.global_rank(lr) for lr in range(4)] == [4, 5, 6, 7]
    assert config("--nnodes", "2", script).master_port == 29500  # torchrun's default on several nodes


def test_rdzv_endpoint_and_env_defaults(script, monkeypatch):
    cfg = config("--rdzv-endpoint", "host-a:29400", "--rdzv-backend", "c10d", "--nnodes", "2", script)
    assert (cfg.master_addr, cfg.master_port) == ("host-a", 29400)
    assert config("--rdzv-endpoint", "[::1]:29400", script).master_addr == "::1"
    monkeypatch.setenv("PET_NNODES", "3")
    monkeypatch.setenv("PET_NODE_RANK", "2")
    cfg = config(script)
    assert (cfg.nnodes, cfg.node_rank) == (3, 2)


def test_standalone_and_rdzv_conf(script):
    cfg = config("--standalone", "--rdzv-conf", "timeout=42", script)
    assert (cfg.master_port, cfg.rdzv_timeout, len(cfg.run_id)) == (0, 42.0, 12)


def test_script_args_stay_with_the_script(script):
    cfg = config(script, "--nnodes", "7", "--max-restarts", "9")
    assert (cfg.nnodes, cfg.max_restarts) == (1, 0)
    assert cfg.command[-4:] == ["--nnodes", "7", "--max-restarts", "9"]
    assert config("-m", "pkg.train", "x").command == [sys.executable, "-u", "-m", "pkg.train", "x"]
    assert config("--no-python", "true", "x").command == ["true", "x"]


def test_worker_reboot_detection(script):
    assert config("--worker-reboot", script).worker_reboot_reason == "--worker-reboot"
    cfg = config(script, "--enable-high-availability", "--enable-worker-reboot")
    assert cfg.worker_reboot and "--enable-worker-reboot" in cfg.worker_reboot_reason
    assert config(script, environ={"HIGH_AVAILABILITY": "dump,recover"}).worker_reboot
    # The reference's override replaces the flags: without `recover`, the script's flag does not count.
    assert not config(script, "--enable-worker-reboot", environ={"HIGH_AVAILABILITY": "dump"}).worker_reboot
    assert "unknown word" in error(script, environ={"HIGH_AVAILABILITY": "dump,fly"})


def test_worker_reboot_gets_restarts_by_default_and_refuses_none(script):
    assert config("--worker-reboot", script).max_restarts == 3
    assert config(script, "--enable-worker-reboot").max_restarts == 3
    assert config("--worker-reboot", "--max-restarts", "1", script).max_restarts == 1
    assert config("--max-restarts", "0", script).max_restarts == 0  # torchrun mode: 0 is torchrun's default
    message = error("--max-restarts", "0", script, "--enable-worker-reboot")
    assert message.startswith("--max-restarts 0 with worker reboot on (the training script was given "
                              "--enable-worker-reboot) would never start a failed worker again")


SLURM = {"SLURM_JOB_ID": "4711", "SLURM_NODEID": "2", "SLURM_NNODES": "4", "SLURM_NTASKS": "4",
         "SLURM_JOB_NODELIST": "gpu[07-09,12]", "SLURM_STEP_NODELIST": "gpu[08-09,12],gpu7"}


def test_under_srun_the_place_comes_from_slurm_and_flags_still_win(script):
    cfg = config("--nproc-per-node", "8", script, environ=SLURM)
    assert (cfg.nnodes, cfg.node_rank, cfg.master_addr, cfg.master_port, cfg.run_id, cfg.place_source) == (
        4, 2, "gpu08", 29500, "4711", "Slurm")
    assert [cfg.global_rank(lr) for lr in (0, 7)] == [16, 23]
    cfg = config("--nnodes", "2", "--node-rank", "1", "--master-addr", "n0", "--rdzv-id", "x", script, environ=SLURM)
    assert (cfg.nnodes, cfg.node_rank, cfg.master_addr, cfg.run_id) == (2, 1, "n0", "x")
    assert config("--standalone", script, environ=SLURM).nnodes == 1  # one node, whatever Slurm says
    assert config(script, environ={**SLURM, "SLURM_NNODES": "1", "SLURM_NTASKS": "1", "SLURM_NODEID": "0"}).nnodes == 1


@pytest.mark.parametrize("change, message", [
    ({"SLURM_NTASKS": "32"}, "SLURM_NTASKS=32 on SLURM_NNODES=4 nodes: start one launcher per node "
                             "(srun --ntasks-per-node=1"),
    ({"SLURM_NODEID": "x"}, "SLURM_NODEID='x': expected a number"),
    ({"SLURM_NODEID": "4"}, "--node-rank 4 is out of range: with --nnodes 4 it must be in 0..3"),
    ({"SLURM_STEP_NODELIST": "gpu[08"}, "node list 'gpu[08' is malformed"),
    ({"SLURM_STEP_NODELIST": "", "SLURM_JOB_NODELIST": ""}, "cannot tell which node is node 0"),
])
def test_slurm_variables_that_cannot_run_are_named(script, change, message):
    assert message in error(script, environ={**SLURM, **change})


@pytest.mark.parametrize("nodelist, host", [
    ("node[01-04,07],gpu5", "node01"), ("r[1-2]-n[3-4],x", "r1-n3"), ("gpu5,gpu6", "gpu5"), ("a[7]", "a7"),
])
def test_first_host_of_a_slurm_node_list(nodelist, host):
    assert first_host(nodelist) == host


@pytest.mark.parametrize("argv, message", [
    (["--nnodes", "2", "--node-rank", "2"], "--node-rank 2 is out of range: with --nnodes 2 it must be in 0..1"),
    (["--node-rank", "-1"], "--node-rank -1 is out of range"),
    (["--nnodes", "1:4"], "elastic node ranges are not supported"),
    (["--nnodes", "two"], "--nnodes 'two': expected a number"),
    (["--nproc-per-node", "0"], "--nproc-per-node must be >= 1, got 0"),
    (["--nproc-per-node", "many"], "expected a number, gpu, cpu or auto"),
    (["--master-addr", "a", "--rdzv-endpoint", "b:1"], "--rdzv-endpoint and --master-addr both say where node 0"),
    (["--master-port", "5", "--rdzv-endpoint", "b:1"], "--rdzv-endpoint and --master-port both say"),
    (["--rdzv-endpoint", "hostonly"], "--rdzv-endpoint 'hostonly' is malformed: expected HOST:PORT"),
    (["--rdzv-endpoint", "h:99999"], "is malformed"),
    (["--rdzv-endpoint", ":29500"], "is malformed"),
    (["--rdzv-backend", "etcd"], "--rdzv-backend 'etcd' is not supported"),
    (["--master-port", "70000"], "--master-port 70000 is not a TCP port"),
    (["--standalone", "--nnodes", "2"], "--standalone is for one node"),
    (["--standalone", "--master-port", "1"], "--standalone picks its own local address and port; drop --master-port"),
    (["--max-restarts", "-1"], "--max-restarts must be >= 0"),
    (["--monitor-interval", "0"], "--monitor-interval must be > 0"),
    (["--rdzv-conf", "read_timeout=5"], "only timeout or join_timeout=SECONDS"),
    (["--rdzv-conf", "timeout=soon"], "--rdzv-conf 'timeout=soon': expected a number of seconds"),
    (["--rdzv-conf", "timeout=-1"], "--rdzv-conf timeout must be > 0"),
    (["--node-lost-after", "0"], "--node-lost-after must be > 0"),
    (["--warm-refill-delay", "-1"], "--warm-refill-delay must be >= 0"),
    (["--node0-wait", "0"], "--node0-wait must be > 0"),
    (["--node0-wait", "soon"], "--node0-wait 'soon': expected a number of seconds"),
    (["--controllers", "3", "--nnodes", "2"], "--controllers 3: one per node at most"),
    (["--controllers", "-1"], "--controllers must be >= 0"),
    (["--standby", "--worker-reboot"], "--standby needs --nnodes 2 or more"),
    (["--standby", "--nnodes", "2"], "--standby needs worker reboot"),
])
def test_errors_name_the_flag(script, argv, message):
    assert message in error(*argv, script)


def test_a_standby_and_the_lost_node_timer(script):
    cfg = config("--nnodes", "3", "--standby", "--node-lost-after", "4.5", script, "--enable-worker-reboot")
    assert cfg.standby and cfg.node_lost_after == 4.5
    assert config(script).node_lost_after == 10.0 and not config(script).standby


def test_the_warm_pool_waits_after_a_hand_out_unless_told_not_to(script):
    assert config(script).warm_refill_delay == 20.0
    assert config("--warm-refill-delay", "0", script).warm_refill_delay == 0.0


def test_the_wait_for_a_new_node_0_defaults_to_the_rendezvous_timeout(script):
    assert config(script).node0_wait == 600.0
    assert config("--rdzv-conf", "timeout=90", script).node0_wait == 90.0
    assert config("--rdzv-conf", "timeout=90", "--node0-wait", "45", script).node0_wait == 45.0


def test_controllers_hosted_by_the_launchers_know_what_the_job_asked_for(script):
    cfg = config("--nnodes", "3", "--controllers", "3", script, "--enable-worker-reboot")
    assert cfg.controllers == 3 and cfg.worker_reboot and not cfg.online_repair
    assert config(script, "--enable-hbmfault-repair").online_repair
    assert config(script, environ={"HIGH_AVAILABILITY": "dump,retry"}).online_repair
    assert config(script).controllers == 0
    assert config(script, "--enable-worker-reboot", "--enable-elastic-training").elastic_training
    assert config(script, environ={"HIGH_AVAILABILITY": "recover,elastic-training"}).elastic_training
    assert not config(script, "--enable-worker-reboot").elastic_training


HA_REBOOT = ("--enable-high-availability", "--enable-worker-reboot")


@pytest.mark.parametrize("nnodes, hosted", [(1, 1), (2, 2), (3, 3), (8, 3)])
def test_a_job_that_replaces_processes_hosts_its_controllers_in_the_launchers_by_default(script, nnodes, hosted):
    cfg = config("--nnodes", str(nnodes), script, *HA_REBOOT)
    assert cfg.controllers == hosted
    assert f"first {hosted} of {nnodes} node" in cfg.controllers_reason
    assert config("--nnodes", "2", script, environ={"HIGH_AVAILABILITY": "dump,recover"}).controllers == 2


def test_controllers_stay_in_the_job_when_asked_or_when_the_job_is_not_ours(script):
    assert config("--nnodes", "2", "--controllers", "0", script, *HA_REBOOT).controllers == 0
    assert config("--nnodes", "2", "--controllers", "1", script, *HA_REBOOT).controllers_reason == ""
    assert config("--nnodes", "2", "--worker-reboot", script).controllers == 0  # a script that is not ours
    assert config("--nnodes", "2", script, "--enable-high-availability").controllers == 0  # no replacement
    external = {"MINDIO_CONTROLLER_ADDR": "10.0.0.9:8000"}
    assert config("--nnodes", "2", script, *HA_REBOOT, environ=external).controllers == 0


def test_missing_script_and_program():
    assert error("/no/such/train.py") == "training script '/no/such/train.py' not found"
    assert "program 'no-such-program-x' not found" in error("--no-python", "no-such-program-x")


def test_parser_exits_2_with_the_message(capsys):
    from mindio_adaptor.cli import main

    with pytest.raises(SystemExit) as info:
        main(["launch", "--nnodes", "2", "--node-rank", "5", "/no/such/train.py"])
    assert info.value.code == 2
    assert "mindio-adaptor launch: error: --node-rank 5 is out of range" in capsys.readouterr().err


def test_worker_env(script):
    cfg = config("--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--master-addr", "n0",
                 "--rdzv-id", "j", script)
    env = worker_env(cfg, 1, master_port=4321, restart_count=2, restarted=True, token="t0k", base={"PATH": "/bin"})
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                                "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "MINDIO_RESTARTED",
                                "OMP_NUM_THREADS", "PATH", "MINDIO_TOKEN")} == {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
        "MASTER_ADDR": "n0", "MASTER_PORT": "4321", "TORCHELASTIC_RESTART_COUNT": "2",
        "TORCHELASTIC_RUN_ID": "j", "TORCHELASTIC_USE_AGENT_STORE": "True", "MINDIO_RESTARTED": "1",
        "OMP_NUM_THREADS": "1", "PATH": "/bin", "MINDIO_TOKEN": "t0k"}  # the token by the environment only
    assert env["MINDIO_FAILURE_DOMAIN"].endswith("/node1")  # each launcher is a node
    given = worker_env(cfg, 1, master_port=4321, restart_count=0, restarted=False, token="t0k",
                       base={"MINDIO_FAILURE_DOMAIN": "rack3"})
    assert given["MINDIO_FAILURE_DOMAIN"] == "rack3"
    assert worker_env(cfg, 0, 1, 0, False, "t0k", base={"MINDIO_RESTARTED": "1"})["MINDIO_RESTARTED"] == "0"


def verdict(code, reboot=False, ended=False, rank_reboots=0, group_restarts=0, max_restarts=1, peers_running=True):
    return on_exit(code, worker_reboot=reboot, ended=ended, rank_reboots=rank_reboots,
                   group_restarts=group_restarts, max_restarts=max_restarts, peers_running=peers_running)


def test_policy():
    assert verdict(0) is Verdict.DONE
    assert verdict(ENDED_BY_CONTROLLER, reboot=True) is Verdict.ENDED
    assert verdict(ENDED_BY_CONTROLLER, max_restarts=0) is Verdict.ENDED  # torchrun mode too
    assert verdict(-9, reboot=True, ended=True) is Verdict.DONE  # after a decided end nothing restarts
    assert verdict(-9, reboot=True) is Verdict.REBOOT_WORKER
    assert verdict(-9, reboot=True, rank_reboots=1) is Verdict.RESTART_GROUP  # past its own: torchrun's way
    assert verdict(1, reboot=True, rank_reboots=1, group_restarts=1) is Verdict.GIVE_UP
    assert verdict(1) is Verdict.RESTART_GROUP
    assert verdict(1, group_restarts=1) is Verdict.GIVE_UP
    assert verdict(1, max_restarts=0, reboot=True) is Verdict.GIVE_UP
    # a rank a scale-in dropped: never restarted, and no end of the job, whatever restarts are left
    assert verdict(LEFT_THE_JOB, reboot=True) is Verdict.LEFT
    assert verdict(LEFT_THE_JOB, reboot=True, rank_reboots=1, group_restarts=1) is Verdict.LEFT
    assert verdict(LEFT_THE_JOB, ended=True) is Verdict.LEFT


def test_describe_exit():
    assert describe(-9) == "signal SIGKILL"
    assert describe(3) == "exit code 3"
    assert describe(86) == "exit code 86 (ENDED_BY_CONTROLLER)"
    assert describe(87) == "exit code 87 (LEFT_THE_JOB)"


def test_policy_reboot_needs_peers():
    # The last worker standing (one node) has nobody to meet: the group is started again instead.
    assert verdict(-9, reboot=True, peers_running=False) is Verdict.RESTART_GROUP


def test_a_hosted_controller_scales_in_when_the_job_asks_for_elastic_training(script):
    from mindio_adaptor.launch.controllers import HostedController

    cfg = config("--nnodes", "2", "--controllers", "1", script, "--enable-worker-reboot", "--enable-elastic-training")
    command = HostedController(cfg, store=None, log=None)._command(backup=False)
    assert "--arf" in command and "--elastic" in command
    plain = config("--nnodes", "2", "--controllers", "1", script, "--enable-worker-reboot")
    assert "--elastic" not in HostedController(plain, store=None, log=None)._command(backup=False)
