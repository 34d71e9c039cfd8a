"""A network partition, not a process death: ranks that lose the leader by a silence (a timeout, no route) have
no proof that its process is gone, so a backup leads them only when they are a strict majority of the world
(controller/election.h). A minority that reaches no leader leaves the job: each of its processors is cut off
(no step, no checkpoint), and a process armed with core/detection/cut_off exits 88 (JOB_UNREACHABLE) naming why.

The leader stays alive in every test here; the ranks reach it through a relay (controller_harness.Partition)
that, once cut, resets their connections and then accepts and never answers, or (as root) each side runs on a
host of its own, a network namespace whose link is taken down (tests/netns_hosts.py). A leader's process that
really died (its address refuses connections: proof) is test_controller_backups.py's: a backup takes over with
any number of ranks there. Real controllers in their own processes, real sockets."""
import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller_harness import Partition, wait_until
from mindio_adaptor import _native as nat
from mindio_adaptor.core.detection.enums import ReportState
from mindio_adaptor.core.detection.exit_codes import JOB_UNREACHABLE
from mindio_adaptor.core.job.processor_link import CutOffFromTheJob, ProcessorLink
from test_controller_backups import (LAYOUT, LINKED_RANKS, STEP, WORLD, RecordingRank, await_decisions, read,
                                     start_controller, stop)

TOKEN = "partition-test-token"
TAKEOVER_WAIT_S = 1.5  # how long the backup holds each registration while it waits for a majority


@pytest.fixture
def env(monkeypatch):
    for key, value in {"MINDIO_TOKEN": TOKEN, "MINDIO_HEARTBEAT_INTERVAL": "0.2", "TTP_RETRY_TIMES": "5",
                       "MINDIO_TAKEOVER_WAIT_S": str(TAKEOVER_WAIT_S), "MINDIO_SILENCE_LIMIT_S": "600"}.items():
        monkeypatch.setenv(key, value)
    return dict(os.environ)


def start_ranks(env, ranks, controllers, log, prefix=()):
    """Ranks in a process of their own (linked_ranks.py, armed to leave the job when cut off); `controllers`:
    host:port strings, the leader first; `prefix`: a command to run it under (a network namespace)."""
    path = os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")] if p)
    process = subprocess.Popen([*prefix, sys.executable, str(LINKED_RANKS), "--world-size", str(WORLD), "--ranks",
                                *map(str, ranks), "--step", str(STEP), "--controllers", ",".join(controllers)],
                               env=dict(env, PYTHONPATH=path), stdout=subprocess.PIPE, stderr=log, text=True)
    assert select.select([process.stdout], [], [], 60)[0], f"ranks {ranks} did not start within 60 s"
    assert process.stdout.readline().strip() == "ready", read(Path(log.name))
    return process


def ended(process, timeout):
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def the_whole_job_is_led_by_the_backup(ranks, backup_log):
    """The backup that took over hears every rank's progress, its takeover settles with every rank, none is cut
    off."""
    for rank in ranks:
        rank.link.update_started(STEP)
        rank.link.update_ended(STEP + 1)
    wait_until(lambda: "every rank registered again" in read(backup_log), 30, "the takeover settled with every rank")
    assert not any(r.link.cut_off() for r in ranks)


def test_a_backup_does_not_lead_a_minority_that_lost_a_live_leader_and_the_minority_leaves(env, tmp_path):
    # As in tests/e2e/test_vanished_node.py: node 1's ranks 2 and 3 (half of the world, no majority) lose the
    # leader by a silence and reach the backup; ranks 0 and 1 stay with the leader.
    backup_log = open(tmp_path / "backup.log", "w")
    (leader, leader_port), (backup, backup_port) = start_controller(env, WORLD), start_controller(
        env, WORLD, "--backup", log=backup_log)
    partition = Partition(leader_port)
    majority = [RecordingRank(r) for r in (0, 1)]
    rank_2 = RecordingRank(2)  # in this process: its processor's state is read below
    node = None
    try:
        for rank in majority:
            rank.start((leader_port, backup_port))
        rank_2.start((partition.port, backup_port))
        with open(tmp_path / "rank3.log", "w") as log:
            node = start_ranks(env, [3], [f"127.0.0.1:{partition.port}", f"127.0.0.1:{backup_port}"], log)
        assert [r.link.controller_term() for r in majority + [rank_2]] == [1, 1, 1]
        cut_at = time.monotonic()
        partition.cut()
        # Once the backup found them a minority, the leader's address refuses connections (as if its job ended
        # meanwhile): after a silence that is no proof, and the backup still does not lead them.
        wait_until(lambda: "sent away" in read(tmp_path / "backup.log"), 30, "the backup's first 'no majority'")
        partition.refuse()
        # Bounded: the relay's silence (5 s) once, the backup's wait twice, a back-off.
        code = ended(node, 60)
        left_after = time.monotonic() - cut_at
        assert code == JOB_UNREACHABLE, (code, read(tmp_path / "rank3.log")[-3000:])
        wait_until(lambda: rank_2.link.cut_off(), 30, "rank 2's processor cut off from the job")
        text = read(tmp_path / "rank3.log")
        assert re.search(r"rank 3 is cut off from the job: lost the controller of term 1 with no proof that its "
                         r"process is gone, and the ranks that reached a backup are a minority \(the backup at "
                         rf"127\.0\.0\.1:{backup_port} does not lead: no majority within 1500 ms .*\); one more round "
                         r"of the controller list found no "
                         r"leader\. It leaves the job without a checkpoint and without another training step; "
                         r"exiting with code 88 \(JOB_UNREACHABLE\)", text), text[-3000:]
        assert "refused a connection: its process is gone" not in text  # a reset, a silence, then a refusal
        # On a loaded machine rank 3's second try of the leader may come before its address refuses: a second
        # silence then, no proof either; or its connection still waits in the relay's backlog when the relay
        # turns to refusing, which resets it: a close during registration, no proof either
        assert (f"the controller of term 1 at 127.0.0.1:{partition.port} refused a connection after a silence: no "
                f"proof") in text or text.count("after: no registration reply within 5000 ms") >= 2 \
            or "after: connection closed during registration" in text, text[-3000:]
        assert left_after < 45, left_after
        # The backup never led: it held their registrations, then sent them away.
        backup_text = read(tmp_path / "backup.log")
        assert "taking over" not in backup_text
        assert re.search(r"idle backup: rank [23] registered, last under term 1: ranks \[[23](,[23])?\] \([12] of 4 "
                         r"ranks, a majority is 3\) lost the controller of term 1 and none proved it gone", backup_text)
        assert re.search(r"idle backup: rank [23] sent away: no majority within 1500 ms \(MINDIO_TAKEOVER_WAIT_S\)",
                         backup_text)
        # Cut off, rank 2 takes no step and its decision wait ends at once, naming why.
        with pytest.raises(RuntimeError, match="rank 2 is cut off from the job and may not start an optimizer update"):
            rank_2.link.update_started(STEP)
        with pytest.raises(CutOffFromTheJob, match="rank 2: cut off from the job: lost the controller of term 1"):
            rank_2.link.await_decision(5)
        assert not rank_2.actions  # no action came from any controller: nothing saved
        # The leader leads the other half as before: same term, connected, and it hears their progress.
        assert [(r.link.controller_term(), r.link.connected()) for r in majority] == [(1, True), (1, True)]
        for rank in majority:
            rank.link.update_started(STEP)
            rank.link.update_ended(STEP + 1)
        assert leader.poll() is None and backup.poll() is None
    finally:
        partition.close()
        stop([r.link for r in majority + [rank_2]], leader, backup, *([node] if node else []))
        backup_log.close()


def test_a_majority_that_lost_a_live_leader_elects_the_backup_once_more_than_half_registered(env, tmp_path,
                                                                                             monkeypatch):
    # Each rank reaches the leader through a relay of its own, so that the partition takes them one by one.
    monkeypatch.setenv("MINDIO_TAKEOVER_WAIT_S", "20")  # covers the ~5 s between rank 1's and rank 2's arrival
    env["MINDIO_TAKEOVER_WAIT_S"] = "20"
    with open(tmp_path / "backup.log", "w") as log:
        (leader, leader_port), (backup, backup_port) = start_controller(env, WORLD), start_controller(
            env, WORLD, "--backup", log=log)
    partitions = [Partition(leader_port) for _ in range(WORLD)]
    ranks = [RecordingRank(r) for r in range(WORLD)]
    try:
        for rank, partition in zip(ranks, partitions):
            rank.start((partition.port, backup_port))
        held = re.compile(r"idle backup: rank (\d) registered, last under term 1: ranks \[([\d,]*)\] \((\d) of 4 ranks, "
                          r"a majority is 3\)")
        partitions[0].cut()
        partitions[1].cut()
        wait_until(lambda: {m.group(1) for m in held.finditer(read(tmp_path / "backup.log"))} == {"0", "1"}, 30,
                   "the backup holding the registrations of ranks 0 and 1")
        time.sleep(0.5)
        text = read(tmp_path / "backup.log")
        assert "taking over" not in text  # two of four: no majority, no proof
        assert [m.group(2) for m in held.finditer(text)][-1] == "0,1"
        assert not ranks[0].link.connected() and not ranks[1].link.connected()
        partitions[2].cut()
        wait_until(lambda: all(r.link.controller_term() == 2 and r.link.connected() for r in ranks[:3]), 30,
                   "ranks 0, 1 and 2 registered with the backup as term 2")
        text = read(tmp_path / "backup.log")
        assert re.search(r"backup controller taking over as term 2: ranks \[0,1,2\] \(3 of 4 ranks, a majority\) lost "
                         r"the controller of term 1, none with proof that it is gone: leading as term 2", text), text
        assert text.index("taking over") > max(m.start() for m in held.finditer(text))
        partitions[3].cut()  # the last one joins the new leader as any rank does
        wait_until(lambda: ranks[3].link.controller_term() == 2 and ranks[3].link.connected(), 30,
                   "rank 3 registered with the backup")
        the_whole_job_is_led_by_the_backup(ranks, tmp_path / "backup.log")
    finally:
        for partition in partitions:
            partition.close()
        stop([r.link for r in ranks], leader, backup)


@contextlib.contextmanager
def a_leader_keeping_rank_3(env, tmp_path, leader_env, hold=None):
    """The leader (with `leader_env`) and a backup in processes of their own, logging to leader.log and
    backup.log; ranks 0 to 2 reach the leader through relays of their own (to be cut), rank 3 directly.
    Yields (the relays, the four ranks) once the leader leads all four; stops everything after."""
    with open(tmp_path / "leader.log", "w") as leader_log, open(tmp_path / "backup.log", "w") as backup_log:
        (leader, leader_port) = start_controller(leader_env, WORLD, log=leader_log)
        (backup, backup_port) = start_controller(env, WORLD, "--backup", log=backup_log)
    partitions = [Partition(leader_port) for _ in range(3)]
    ranks = [RecordingRank(r, hold=hold) for r in range(WORLD)]
    try:
        for rank, partition in zip(ranks, partitions):
            rank.start((partition.port, backup_port))
        ranks[3].start((leader_port, backup_port))
        wait_until(lambda: "all 4 ranks registered" in read(tmp_path / "leader.log"), 30, "the leader leading 4 ranks")
        yield partitions, ranks
    finally:
        for partition in partitions:
            partition.close()
        stop([r.link for r in ranks], leader, backup)


def test_a_leader_left_with_a_minority_does_not_act_stands_down_and_its_rank_joins_the_new_leader(env, tmp_path,
                                                                                                  monkeypatch):
    # The mirror of the first test: the leader keeps only rank 3. It sees ranks 0 to 2 fall silent, which a
    # death looks like too (the hang rule names them); they are a majority, reach the backup and elect it. Without the lease the
    # leader would decide on their "deaths" (a dump, a replacement, the end) beside the new leader. With it, it
    # holds those faults, then stands down after max(5 s, 3 heartbeat periods), and rank 3 walks its list to
    # the new leader: one controller acts, and the whole job goes on under term 2.
    monkeypatch.setenv("MINDIO_TAKEOVER_WAIT_S", "20")  # the new leader waits for rank 3 to come over
    env["MINDIO_TAKEOVER_WAIT_S"] = "20"
    # The relay leaves the leader's side of the cut connections open and silent: its hang rule names them
    # after the silence limit
    with a_leader_keeping_rank_3(env, tmp_path, dict(env, MINDIO_SILENCE_LIMIT_S="2")) as (partitions, ranks):
        for partition in partitions:
            partition.cut()
        wait_until(lambda: "stood down" in read(tmp_path / "leader.log"), 30, "the old leader standing down")
        wait_until(lambda: all(r.link.controller_term() == 2 and r.link.connected() for r in ranks), 40,
                   "every rank registered with the backup as term 2")
        leader_text = read(tmp_path / "leader.log")
        assert re.search(r"term 1: no lease: 1 of 4 ranks connected or proven ended; ranks \[0,1,2\] lost without "
                         r"proof of an end: less than half of the world\. A backup may lead them .*held, not acted on, "
                         r"for at most 5000 ms", leader_text), leader_text[-3000:]
        assert re.search(r"this controller \(term 1\) stood down: no lease for \d+ ms \(1 of 4 ranks", leader_text)
        assert "decision" not in leader_text  # nothing was decided on the faults it held
        assert not [a for r in ranks for t, _, a in r.actions if t == 1]  # no action from term 1 reached a rank
        backup_text = read(tmp_path / "backup.log")
        assert "backup controller taking over as term 2" in backup_text, backup_text[-3000:]
        assert "refused registration of rank 3" in leader_text
        the_whole_job_is_led_by_the_backup(ranks, tmp_path / "backup.log")
        assert "declared dead" not in read(tmp_path / "backup.log")


def test_a_partition_that_begins_during_a_recovery_stops_the_leader_before_its_next_action(env, tmp_path,
                                                                                          monkeypatch):
    # Rank 1's UCE starts an online repair; every rank holds in CLEAN when ranks 0 to 2 are cut off from the
    # leader, which keeps rank 3. Their CLEAN replies never reach it; they elect the backup (3 of 4). The
    # leader's CLEAN fails on their silence, and its fallback (a dump, or with rank 3 alone an EXIT) would
    # act beside the new leader. Without the lease between a flow's steps it sends nothing more, stands
    # down, and rank 3 joins term 2, which alone finishes the recovery.
    monkeypatch.setenv("MINDIO_TAKEOVER_WAIT_S", "20")  # the new leader waits for rank 3 to come over
    env["MINDIO_TAKEOVER_WAIT_S"] = "20"
    leader_env = dict(env, MINDIO_TEST_ACTION_TIME_LIMIT="3")
    with a_leader_keeping_rank_3(env, tmp_path, leader_env, hold="clean") as (partitions, ranks):
        ranks[1].link.report_fault(ReportState.UCE)
        wait_until(lambda: all("clean" in r.names(1) for r in ranks), 30, "every rank at CLEAN under term 1")
        for partition in partitions:
            partition.cut()
        for rank in ranks:
            rank.release.set()
        wait_until(lambda: "stood down" in read(tmp_path / "leader.log"), 30, "the old leader standing down")
        decisions = await_decisions(ranks)
        leader_text = read(tmp_path / "leader.log")
        assert re.search(r"action clean failed on rank [012]: no reply to clean within 3000 ms", leader_text)
        assert re.search(r"term 1: no lease: 1 of 4 ranks connected or proven ended; ranks \[0,1,2\] lost without "
                         r"proof of an end: less than half of the world\. A backup may lead them .*the recovery under "
                         r"way is held before its next action for at most 5000 ms", leader_text), leader_text[-3000:]
        assert re.search(r"this controller \(term 1\) stood down: no lease for \d+ ms \(1 of 4 ranks", leader_text)
        assert re.findall(r"action (\w+) sn \d+ to", leader_text)[-1] == "clean"  # nothing was sent after it
        for rank in ranks:
            assert rank.names(1) == ["prelock", "stop", "clean"], (rank.rank, rank.names(1))
        backup_text = read(tmp_path / "backup.log")
        assert "backup controller taking over as term 2" in backup_text, backup_text[-3000:]
        assert [(d.go_on, d.strategy) for d in decisions] == [(True, "retry")] * WORLD
        _, repair = ranks[1].first(2, "repair")
        assert [(a.src, a.dst) for a in repair.own_repairs(1)] == [((3,), (1,))]


def test_a_held_registration_is_answered_awaiting_a_majority_then_no_majority_on_the_wire(env):
    # The backup's side alone: a rank that lost term 1 without proof is held open, then sent away.
    import socket

    backup, backup_port = start_controller(env, WORLD, "--backup")
    types = nat.MSG_TYPES
    try:
        with socket.create_connection(("127.0.0.1", backup_port), timeout=10) as sock:
            register = {"rank": 2, "world_size": WORLD, "heartbeat_ms": 200, "token": TOKEN, "term": 1}
            sock.sendall(nat.encode_frame(types["REGISTER"], 0, nat.encode_message(types["REGISTER"], register)))
            first, second = read_acks(sock, 2, timeout=TAKEOVER_WAIT_S + 10)
            assert first["result"] == nat.AWAITING_MAJORITY and first["term"] == 0
            assert first["message"].startswith("ranks [2] (1 of 4 ranks, a majority is 3) lost the controller of term 1")
            assert second["result"] == nat.NO_MAJORITY
            assert second["message"].startswith("no majority within 1500 ms (MINDIO_TAKEOVER_WAIT_S): ranks [2]")
            assert sock.recv(1) == b""  # then closed
        with socket.create_connection(("127.0.0.1", backup_port), timeout=10) as sock:  # with proof: it leads
            register = {"rank": 2, "world_size": WORLD, "heartbeat_ms": 200, "token": TOKEN, "term": 1,
                        "leader_gone": True}
            sock.sendall(nat.encode_frame(types["REGISTER"], 0, nat.encode_message(types["REGISTER"], register)))
            (ack,) = read_acks(sock, 1, timeout=10)
            assert (ack["result"], ack["term"]) == (0, 2)
    finally:
        stop([], backup)


def read_acks(sock, count, timeout):
    types, acks, buffer = nat.MSG_TYPES, [], b""
    deadline = time.monotonic() + timeout
    while len(acks) < count:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(acks)} of {count} replies"
        buffer += chunk
        while len(buffer) >= nat.FRAME_HEADER_SIZE:
            size = nat.FRAME_HEADER_SIZE + int.from_bytes(buffer[16:20], "little")
            if len(buffer) < size:
                break
            kind, _, body = nat.decode_frame(buffer[:size])
            assert kind == types["REGISTER_ACK"]
            acks.append(nat.decode_message(kind, body))
            buffer = buffer[size:]
    return acks


# ---- the same partition between hosts (root: network namespaces) -----------------------------------

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from netns_hosts import NetnsHosts, available  # noqa: E402


def start_hosted_controller(env, hosts, host, *flags, log):
    address = hosts.address(host)
    process = hosts.popen(host, [sys.executable, "-m", "mindio_adaptor.cli", "controller", "--world-size",
                                 str(WORLD), "--port", "0", "--host", address, *flags], env=env,
                          stdout=subprocess.PIPE, stderr=log, text=True)
    line = process.stdout.readline()
    match = re.search(rf"listening on {re.escape(address)}:(\d+)", line)
    assert match, (line, read(Path(log.name)))
    return process, f"{address}:{match.group(1)}"


@pytest.mark.skipif(bool(available()), reason=available() or "-")
def test_a_vanished_hosts_ranks_are_not_led_by_its_backup_and_leave_the_job(env, tmp_path):
    # Host 0: the leader and ranks 0 and 1; host 1: the backup and ranks 2 and 3. Host 1's link goes down: its
    # ranks' heartbeats go unacknowledged (TCP_USER_TIMEOUT), the leader's address does not answer (no FIN, no
    # RST, no refusal), and the only controller they reach is the backup on their own host.
    env = dict(env, PYTHONPATH=os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[2]),
                                                           env.get("PYTHONPATH", "")] if p))
    processes = []
    with NetnsHosts(2) as hosts:
        logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("leader", "backup", "host0", "host1")}
        try:
            leader, leader_at = start_hosted_controller(env, hosts, 0, log=logs["leader"])
            backup, backup_at = start_hosted_controller(env, hosts, 1, "--backup", log=logs["backup"])
            processes += [leader, backup]
            controllers = [leader_at, backup_at]
            processes.append(start_ranks(env, [0, 1], controllers, logs["host0"], prefix=hosts.command(0, [])))
            host_1 = start_ranks(env, [2, 3], controllers, logs["host1"], prefix=hosts.command(1, []))
            processes.append(host_1)
            vanished_at = time.monotonic()
            hosts.vanish(1)
            code = ended(host_1, 90)
            text = read(tmp_path / "host1.log")
            assert code == JOB_UNREACHABLE, (code, text[-3000:])
            assert time.monotonic() - vanished_at < 60
            # Both processors are cut off at about the same time; the first to be ends the process.
            assert re.search(r"\[processor rank [23]\] cut off from the job: lost the controller of term 1 with no "
                             r"proof that its process is gone", text)
            assert re.search(r"rank [23] is cut off from the job: .* exiting with code 88 \(JOB_UNREACHABLE\)", text)
            assert "refused a connection" not in text
            backup_text = read(tmp_path / "backup.log")
            assert "taking over" not in backup_text, backup_text[-3000:]
            assert "sent away: no majority within 1500 ms" in backup_text
            assert processes[2].poll() is None  # host 0's ranks go on with their leader
        finally:
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGKILL)
                    process.wait(timeout=10)
            for log in logs.values():
                log.close()
