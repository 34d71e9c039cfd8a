"""The older exception-checkpoint API (mindio_adaptor.ttp.exception_checkpoint, re-exported as
mindx_elastic.torch_exception_module). Reference facts: shared notes, reference-system.md §8.

Layout oracle used below, written from the rule rather than the code: a data-parallel list L of d
ranks with R replicas has g = d / R shards; shard j is held by L[j], L[j+g], ... With partial save
the model is resumable when every shard keeps a healthy holder; without it, when every list does.
"""
import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import torch

import mindio_adaptor.ttp.exception_checkpoint as ec
from mindio_adaptor.ttp.exception_checkpoint import ExceptionHandler, Shard, ShardUnavailableError

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "integration" / "exception_checkpoint_worker.py"
PLACEMENT_ENV = ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", ec.FAULT_RANKS_ENV)
TIMEOUT_S = 20  # above the workers' own 15 s waits


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in PLACEMENT_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def handler():
    h = ExceptionHandler()
    yield h
    h.remove_signal_handler()  # set_config took over SIGTERM in the pytest process


def configured(handler, monkeypatch, world=4, **config):
    monkeypatch.setenv("WORLD_SIZE", str(world))
    handler.set_config(lambda *a: None, **config)
    return handler


def child_env(**extra):
    env = dict(os.environ, PYTHONPATH=str(REPO), **extra)
    for name in PLACEMENT_ENV:
        env.pop(name, None)
    return env


# ------------------------------------------------------------------------------------------------
# The compatibility face and the fields
# ------------------------------------------------------------------------------------------------

def test_mindx_elastic_reexports_the_one_instance_with_reference_defaults():
    from mindx_elastic.torch_exception_module import ExceptionHandler as Face, exception_checkpoint

    assert exception_checkpoint is ec.exception_checkpoint and Face is ExceptionHandler
    fresh = ExceptionHandler()
    assert (fresh._save_func, fresh._args, fresh._group_info, fresh._partial_save, fresh._replicas) == \
        (None, (), None, False, 1)


def test_import_leaves_sigterm_alone():
    code = ("import signal; before = signal.getsignal(signal.SIGTERM); "
            "import mindx_elastic.torch_exception_module; "
            "assert signal.getsignal(signal.SIGTERM) is before")
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True, timeout=TIMEOUT_S)


# ------------------------------------------------------------------------------------------------
# set_config
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, named", [
    (dict(save_func=3), TypeError, "save_func"),
    (dict(args="dir"), TypeError, "args"),
    (dict(args={"a": 1}), TypeError, "args"),
    (dict(partial_save="yes"), TypeError, "partial_save"),
    (dict(group_info=[0, 1]), TypeError, "group_info[0]"),
    (dict(group_info=[]), TypeError, "group_info"),
    (dict(group_info="0,1"), TypeError, "group_info"),
    (dict(group_info=[[0, 1], []]), TypeError, "group_info[1]"),
    (dict(group_info=[[0, -1]]), ValueError, "group_info[0]"),
    (dict(group_info=[[0, 1.0]]), ValueError, "group_info[0]"),
    (dict(group_info=[[0, 1], [1, 2]]), ValueError, "rank 1 more than once"),
    (dict(group_info=[[0, 0]]), ValueError, "rank 0 more than once"),
    (dict(replicas=0), ValueError, "replicas"),
    (dict(replicas=True), ValueError, "replicas"),
    (dict(replicas=1.5), ValueError, "replicas"),
    (dict(replicas=3), ValueError, "replicas=3 does not divide the world size 4"),
    (dict(replicas=2, group_info=[[0, 1, 2], [3, 4, 5]]), ValueError, "replicas=2 does not fit"),
    (dict(replicas=2, group_info=[[0], [1]]), ValueError, "replicas=2 does not fit"),
])
def test_set_config_rejects_bad_arguments_by_name(handler, monkeypatch, kwargs, error, named):
    monkeypatch.setenv("WORLD_SIZE", "4")
    full = dict(save_func=print, args=(), partial_save=False, group_info=None, replicas=1)
    full.update(kwargs)
    with pytest.raises(error, match=named.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        handler.set_config(**full)
    # A rejected call stores nothing and takes no signal.
    assert handler._save_func is None and handler._replicas == 1
    assert signal.getsignal(signal.SIGTERM) != handler._on_sigterm


def test_set_config_stores_and_takes_sigterm_once(handler, monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    handler.set_config(print, ["d", 1], True, [[0, 2], [1, 3]], 2)
    assert (handler._save_func, handler._args, handler._group_info, handler._partial_save, handler._replicas) == \
        (print, ("d", 1), ((0, 2), (1, 3)), True, 2)
    assert signal.getsignal(signal.SIGTERM) == handler._on_sigterm
    handler.set_config(print)  # a second call must not record itself as the previous handler
    assert handler._previous_handler is before
    handler.remove_signal_handler()
    assert signal.getsignal(signal.SIGTERM) is before


def test_set_config_off_the_main_thread_keeps_sigterm_and_warns(handler, caplog):
    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=handler.set_config, args=(print,))
    thread.start()
    thread.join(timeout=TIMEOUT_S)
    assert handler._save_func is print  # configured all the same
    assert signal.getsignal(signal.SIGTERM) is before
    assert "outside the main thread" in caplog.text


# ------------------------------------------------------------------------------------------------
# check_resumable_model and resume_iteration
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config, faults, resumable", [
    # 4 ranks, partial save, 2 replicas: shard 0 on ranks 0,2; shard 1 on ranks 1,3
    (dict(partial_save=True, replicas=2), set(), True),
    (dict(partial_save=True, replicas=2), {3}, True),
    (dict(partial_save=True, replicas=2), {0, 1}, True),
    (dict(partial_save=True, replicas=2), {1, 3}, False),
    (dict(partial_save=True, replicas=2), {0, 2}, False),
    # one replica: every rank is the only holder of its shard
    (dict(partial_save=True, replicas=1), {2}, False),
    # 4 ranks, 4 replicas: one shard on every rank
    (dict(partial_save=True, replicas=4), {0, 1, 2}, True),
    # no partial save: any healthy rank of a list holds the whole state
    (dict(), {0, 1, 2}, True),
    (dict(), {0, 1, 2, 3}, False),
    (dict(group_info=[[0, 2], [1, 3]]), {0, 3}, True),
    (dict(group_info=[[0, 2], [1, 3]]), {0, 2}, False),
    # 8 ranks, TP=2: lists [0,2,4,6] and [1,3,5,7]; R=2 -> holders (0,4) (2,6) (1,5) (3,7)
    (dict(partial_save=True, replicas=2, group_info=[[0, 2, 4, 6], [1, 3, 5, 7]]), {0, 2, 5, 7}, True),
    (dict(partial_save=True, replicas=2, group_info=[[0, 2, 4, 6], [1, 3, 5, 7]]), {1, 5}, False),
])
def test_check_resumable_model(handler, monkeypatch, config, faults, resumable):
    configured(handler, monkeypatch, **config)
    assert handler.check_resumable_model(faults) is resumable
    handler.mark_faulty(faults)  # the default fault source gives the same answer
    assert handler.check_resumable_model() is resumable


def test_lost_shards_name_the_shard_and_its_holders(handler, monkeypatch):
    configured(handler, monkeypatch, partial_save=True, replicas=2, group_info=[[0, 2, 4, 6], [1, 3, 5, 7]])
    assert handler.shards() == [Shard(0, 0, (0, 4)), Shard(0, 1, (2, 6)), Shard(1, 0, (1, 5)), Shard(1, 1, (3, 7))]
    assert handler.lost_shards({1, 5, 2}) == [Shard(1, 0, (1, 5))]
    assert "shard 0 of data-parallel list 1 (held by ranks [1, 5])" in Shard(1, 0, (1, 5)).describe()


def test_unconfigured_handler_is_pure_data_parallel_over_the_world(handler, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert handler.check_resumable_model([1]) and not handler.check_resumable_model([0, 1])


@pytest.mark.parametrize("iteration, interval, faults, expected", [
    (1234, 100, {3}, 1234),  # resumable: keep the step the dying-gasp files hold
    (1234, 100, {1, 3}, 1200),  # not resumable: last periodic checkpoint
    (1200, 100, {1, 3}, 1200),
    (99, 100, {1, 3}, 0),
    (7, 1, {1, 3}, 7),
])
def test_resume_iteration(handler, monkeypatch, iteration, interval, faults, expected):
    configured(handler, monkeypatch, partial_save=True, replicas=2)
    assert handler.resume_iteration(iteration, interval, faults) == expected


@pytest.mark.parametrize("iteration, interval, named", [(-1, 10, "iteration"), (10, 0, "save_interval"),
                                                         (10, 2.5, "save_interval")])
def test_resume_iteration_rejects_bad_numbers(handler, iteration, interval, named):
    with pytest.raises(ValueError, match=named):
        handler.resume_iteration(iteration, interval)


def test_module_helpers_use_the_one_instance(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(ec.FAULT_RANKS_ENV, "0,1")
    assert ec.check_resumable_model() is False
    assert ec.resume_iteration(25, 10) == 20


# ------------------------------------------------------------------------------------------------
# Where faults come from
# ------------------------------------------------------------------------------------------------

def test_fault_ranks_join_mark_faulty_and_the_env_list(handler, monkeypatch):
    monkeypatch.setenv(ec.FAULT_RANKS_ENV, " 1, 5 ,")
    handler.mark_faulty(6)
    handler.mark_faulty([9, 1])
    assert handler.fault_ranks() == [1, 5, 6, 9]
    handler.clear_faults()
    assert handler.fault_ranks() == [1, 5]


@pytest.mark.parametrize("bad", ["1,x", "1;2", "-3"])
def test_bad_env_fault_list_names_the_variable(handler, monkeypatch, bad):
    monkeypatch.setenv(ec.FAULT_RANKS_ENV, bad)
    with pytest.raises(ValueError, match=ec.FAULT_RANKS_ENV):
        handler.fault_ranks()


@pytest.mark.parametrize("bad, error", [("3", TypeError), (-1, ValueError), ([1, "2"], ValueError),
                                        ([True], ValueError)])
def test_mark_faulty_rejects_non_ranks(handler, bad, error):
    with pytest.raises(error, match="mark_faulty"):
        handler.mark_faulty(bad)


# Strings, as the reference's documented use tests them: `str(args.rank) in _get_fault_npus()`.
@pytest.mark.parametrize("env, expected", [
    ({"LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1"}, ["5", "6"]),  # host 1 runs ranks 4..7
    ({"LOCAL_WORLD_SIZE": "4", "RANK": "2"}, ["1"]),  # no GROUP_RANK: host of rank 2 is 0..3
    ({"LOCAL_WORLD_SIZE": "2", "RANK": "9"}, ["9"]),
    ({}, ["1", "5", "6", "9"]),  # hosts unknown: every known fault counts as local
])
def test_get_fault_npus_keeps_this_hosts_ranks(handler, monkeypatch, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(ec.FAULT_RANKS_ENV, "1,5")
    handler.mark_faulty([6, 9])
    assert handler._get_fault_npus() == expected


def test_rank_and_world_come_from_torch_distributed_when_initialised(handler, monkeypatch, tmp_path):
    fake = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 get_rank=lambda: 6, get_world_size=lambda: 8)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)
    monkeypatch.setenv("RANK", "0")  # the live group wins over a stale environment
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    handler.mark_faulty([1, 4, 7])
    assert handler._get_fault_npus() == ["4", "7"]
    assert str(4) in handler._get_fault_npus() and str(6) not in handler._get_fault_npus()
    assert ec.partial_save_path(str(tmp_path)) == str(tmp_path / "model_optim_rng_6.pt")
    handler.set_config(print, partial_save=True, replicas=2)  # group_info None: the 8-rank world
    assert handler.shard_of(6) == Shard(0, 2, (2, 6))


# ------------------------------------------------------------------------------------------------
# Partial-save files and the replica fallback
# ------------------------------------------------------------------------------------------------

def write_four_ranks(directory, ranks=(0, 1, 2, 3)):
    for rank in ranks:
        ec.save_partial(str(directory), {"saved_by": rank, "shard": rank % 2}, rank=rank)


def test_save_partial_writes_the_rank_file_whole(tmp_path):
    path = ec.save_partial(str(tmp_path / "new"), {"x": torch.ones(2)}, rank=3)
    assert path == str(tmp_path / "new" / "model_optim_rng_3.pt")
    assert os.listdir(tmp_path / "new") == ["model_optim_rng_3.pt"]  # no temporary left behind


def test_load_partial_prefers_the_own_file(handler, monkeypatch, tmp_path):
    configured(handler, monkeypatch, partial_save=True, replicas=2)
    write_four_ranks(tmp_path)
    assert handler.load_partial(str(tmp_path), 3) == {"saved_by": 3, "shard": 1}


@pytest.mark.parametrize("damage", ["missing", "truncated", "marked faulty"])
def test_load_partial_falls_back_to_the_replica(handler, monkeypatch, tmp_path, damage):
    configured(handler, monkeypatch, partial_save=True, replicas=2)
    write_four_ranks(tmp_path)
    own = tmp_path / "model_optim_rng_3.pt"
    if damage == "missing":
        own.unlink()
    elif damage == "truncated":
        own.write_bytes(own.read_bytes()[:10])
    else:
        handler.mark_faulty(3)  # its file may be stale: not trusted
    assert handler.load_partial(str(tmp_path), 3) == {"saved_by": 1, "shard": 1}


def test_load_partial_names_the_shard_when_no_replica_file_is_left(handler, monkeypatch, tmp_path):
    configured(handler, monkeypatch, partial_save=True, replicas=2)
    write_four_ranks(tmp_path, ranks=(0, 2, 3))
    handler.mark_faulty(3)
    with pytest.raises(ShardUnavailableError, match=r"shard 1 of data-parallel list 0 \(held by ranks \[1, 3\]\)"):
        handler.load_partial(str(tmp_path), 3)


def test_load_partial_without_partial_save_reads_any_rank_of_the_list(handler, monkeypatch, tmp_path):
    configured(handler, monkeypatch, group_info=[[0, 2], [1, 3]])
    write_four_ranks(tmp_path, ranks=(0, 3))
    assert handler.load_partial(str(tmp_path), 1)["saved_by"] == 3
    with pytest.raises(ValueError, match="rank 5 is in no data-parallel list"):
        handler.load_partial(str(tmp_path), 5)


# ------------------------------------------------------------------------------------------------
# A real SIGTERM, real processes
# ------------------------------------------------------------------------------------------------

class Worker:
    """A worker process whose output is drained by threads, so every read has a deadline and a
    chatty stderr can never block the worker on a full pipe."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([sys.executable, str(WORKER), *map(str, args)], env=child_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.err = []
        self.pumps = [threading.Thread(target=self._pump_out, daemon=True),
                      threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True)]
        for pump in self.pumps:
            pump.start()

    def _pump_out(self):
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)  # EOF

    def next_line(self) -> str:
        try:
            line = self.lines.get(timeout=TIMEOUT_S)
        except queue.Empty:
            return "(no line within the timeout)"
        return "(worker closed its output)" if line is None else line

    def expect_ready(self) -> str:
        line = self.next_line()
        if not line.startswith("READY"):
            self.kill()
            pytest.fail(f"worker not ready: {line}; stderr: {''.join(self.err)}")
        return line

    def finish(self):
        """(exit code, the stdout lines not read yet, stderr) once the process has ended."""
        self.proc.wait(timeout=TIMEOUT_S)
        for pump in self.pumps:
            pump.join(timeout=TIMEOUT_S)
        rest = []
        while not (line := self.next_line()).startswith("("):
            rest.append(line)
        return self.proc.returncode, rest, "".join(self.err)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT_S)


def test_sigterm_saves_then_ends_as_the_previous_handler_says(tmp_path):
    # previous handler -> (exit status, does the process go on after the save?)
    cases = {"default": (-signal.SIGTERM, False), "exit7": (7, False), "ignore": (0, True),
             "failing-save": (-signal.SIGTERM, False)}
    workers = {name: Worker("sigterm", tmp_path / name, name) for name in cases}
    try:
        for worker in workers.values():
            worker.expect_ready()
        for worker in workers.values():
            worker.proc.send_signal(signal.SIGTERM)
        for name, worker in workers.items():
            rc, out, err = worker.finish()
            expected_rc, goes_on = cases[name]
            assert rc == expected_rc, (name, out, err)
            assert ("CONTINUED" in out) is goes_on, (name, out)
            if name == "failing-save":
                assert "save_func failed" in err and not (tmp_path / name).exists()
            else:
                assert (tmp_path / name).read_text() == "saved"
    finally:
        for worker in workers.values():
            worker.kill()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gloo_ranks_partial_save_on_sigterm_and_a_lost_file_comes_back_from_its_replica(
        handler, monkeypatch, tmp_path):
    world = 4
    launcher = Worker("partial", tmp_path, free_port(), world)
    pids = []
    try:
        for _ in range(world):
            pids.append(int(launcher.expect_ready().split()[2]))
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        rc, out, err = launcher.finish()
        assert rc == 0 and sorted(out) == [f"EXIT {r} {-signal.SIGTERM}" for r in range(world)], (out, err)
    finally:
        for pid in pids:  # the rank processes this test started, should a check above have failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        launcher.kill()
    assert sorted(os.listdir(tmp_path)) == [f"model_optim_rng_{r}.pt" for r in range(world)]

    (tmp_path / "model_optim_rng_3.pt").unlink()
    configured(handler, monkeypatch, world=world, partial_save=True, replicas=2)
    assert handler.check_resumable_model([3])
    restored = handler.load_partial(str(tmp_path), 3)
    expected = torch.arange(4.0) * 10 + 1 + sum(range(world))  # shard 1, as rank 1 built it
    assert (restored["shard"], restored["saved_by"]) == (1, 1)
    assert torch.equal(restored["weights"], expected)
    assert torch.equal(handler.load_partial(str(tmp_path), 2)["weights"], torch.arange(4.0) * 10 + 6)
