"""How the controller scales with the number of ranks: N simulated processors heartbeat against one
real controller over real localhost sockets.

    python bench/controller_scale.py [--n 1024,4096,16384] [--heartbeat-s 2] [--reps 3]
                                     [--window-s 6] [--client-procs 2] [--collect-s 0.5]

Processes: the controller (the real one, through tft_init_controller / tft_start_controller) runs
alone in a child process, so that that process's CPU time is the controller's; the ranks are played
by `_native.ProcessorSim` (one C++ epoll thread per client process speaking the real wire protocol:
Register, ReplicaInfo, Status, a Heartbeat every period, an ActionReply to every action).

Per N it prints:
- controller CPU share: the controller process's user+system CPU seconds per wall second over a
  steady window (1.0 = one core fully busy), and the clients' share beside it;
- heartbeat handling rate: heartbeats/s the controller processed (its `heartbeats` counter) next to
  the rate the clients sent;
- fault-to-first-action latency: one rank reports a memory error (UCE) -> time until EVERY rank has
  received STOP, median over --reps repetitions, each followed by the whole online-repair flow back
  to NORMAL. "Received" is the kernel's receive timestamp of the bytes that carried a rank's STOP
  (SO_TIMESTAMPNS on the client socket, brought onto the monotonic clock the report time is taken
  on): the moment the STOP is in that rank's socket, which on loopback is when the controller's
  send(2) for that rank returned. Beside it, "handled": when the client thread got round to the
  frame. A client thread plays thousands of ranks, so that adds the simulation's own queueing (a
  real processor has a thread per rank); the gap between the two columns is that queueing.
  The latency includes the controller's fault-collection window (MINDIO_FAULT_COLLECT_TIME, default
  0.5 s: it waits that long for related faults before deciding), printed beside it. A lone UCE with
  every other rank healthy closes the window early (after COINCIDENT_REPORTS_MS, 100 ms; see
  collection_can_close in csrc/controller/planner.h), so "-collect" is then negative.

Everything runs on 127.0.0.1; every wait has a timeout. The clients share the machine's cores with
the controller, so on a small machine the numbers are an upper bound of what the controller costs
on a host of its own; the load average before and after the run is printed with the table. A
benchmark, not a test: nothing is asserted about time.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import resource
import secrets
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script, the checkout's build is the one measured

HOST = "127.0.0.1"
UCE = 2  # ReportState.UCE: a memory error, which the controller repairs online (STOP first)
FD_SLACK = 64  # listen socket, epoll, eventfd, pipes, logs, Python's own
CHILD_LIFETIME_S = 3600  # a child left behind by a crashed parent still ends by itself
DEFAULT_NS = (1024, 4096, 16384)


class BenchError(RuntimeError):
    pass


@dataclass
class Options:
    heartbeat_s: float = 2.0
    reps: int = 3
    window_s: float = 6.0
    client_procs: int = 2
    collect_s: float = 0.5
    dp_size: int = 8
    connect_window: int = 256
    stop_timeout_s: float = 30.0
    flow_timeout_s: float = 120.0


# ---- limits of this machine --------------------------------------------------------------------

def raise_nofile(need: int) -> int:
    """Raise the soft RLIMIT_NOFILE towards `need` (up to the hard limit); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def read_int_file(path: str, default=None):
    try:
        return [int(x) for x in Path(path).read_text().split()]
    except (OSError, ValueError):
        return default


def limit_problem(n: int, opts: Options):
    """What of this machine prevents N connections, or None."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    per_client = math.ceil(n / opts.client_procs) + FD_SLACK
    need = max(n + FD_SLACK, per_client)
    if hard != resource.RLIM_INFINITY and hard < need:
        return f"RLIMIT_NOFILE hard limit {hard} < {need} descriptors needed by one process"
    ports = read_int_file("/proc/sys/net/ipv4/ip_local_port_range")
    if ports and ports[1] - ports[0] + 1 < n:
        return f"net.ipv4.ip_local_port_range {ports} has fewer than {n} ports for the clients"
    return None


def machine_limits() -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    somaxconn = read_int_file("/proc/sys/net/core/somaxconn", ["?"])[0]
    ports = read_int_file("/proc/sys/net/ipv4/ip_local_port_range", ["?", "?"])
    return (f"cores {os.cpu_count()}, RLIMIT_NOFILE soft {soft} hard {hard}, somaxconn {somaxconn} "
            f"(the controller asks listen(4096)), local ports {ports[0]}-{ports[1]}")


# ---- child processes ---------------------------------------------------------------------------

def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def serve(conn, handlers: dict) -> None:
    """Answer (command, args) from the parent until 'quit', the parent's death or CHILD_LIFETIME_S."""
    parent, ends = os.getppid(), time.monotonic() + CHILD_LIFETIME_S
    while time.monotonic() < ends and os.getppid() == parent:
        if not conn.poll(1.0):
            continue
        command, args = conn.recv()
        if command == "quit":
            return
        try:
            conn.send(("ok", handlers[command](*args)))
        except Exception as e:  # the parent raises it with the child's traceback
            conn.send(("error", f"{command}: {e}\n{traceback.format_exc()}"))


def controller_main(conn, n: int, env: dict, log_path: str) -> None:
    # The controller logs a line per registration: into a file, so the terminal shows the table.
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 2)
    os.environ.update(env)
    raise_nofile(n + FD_SLACK)
    from mindio_adaptor.ttp import controller as ctl

    ctl.tft_init_controller(-1, n)
    try:
        port = ctl.tft_start_controller(HOST, 0, enable_tls=False)
        conn.send(("ok", port))
        sample = lambda: (time.monotonic(), cpu_seconds(), ctl.controller_stats(), ctl.controller_state())
        serve(conn, {"sample": sample})
    finally:
        ctl.tft_destroy_controller()


def clients_main(conn, port: int, first: int, count: int, n: int, token: str, opts: Options) -> None:
    soft = raise_nofile(count + FD_SLACK)
    if soft < count + FD_SLACK:
        raise BenchError(f"RLIMIT_NOFILE {soft} is below the {count + FD_SLACK} descriptors {count} clients need")
    from mindio_adaptor import _native

    sim = _native.ProcessorSim(HOST, port, first, count, n, opts.heartbeat_s, opts.dp_size, 2, token,
                               opts.connect_window)
    sim.start()
    conn.send(("ok", None))

    def stops():
        handled = [t for t in sim.stop_times() if t >= 0]
        arrived = [t for t in sim.stop_arrivals() if t >= 0]
        return (len(handled), max(handled, default=math.nan), min(handled, default=math.nan),
                max(arrived, default=math.nan), min(arrived, default=math.nan), len(arrived))

    try:
        serve(conn, {
            "stats": lambda: (time.monotonic(), cpu_seconds(), sim.stats(), sim.first_error()),
            "clear": sim.clear_stops,
            "report": lambda rank: sim.report_error(rank, UCE, "", 5.0),
            "stops": stops,
        })
    finally:
        sim.stop()


class Child:
    """A child process and its command pipe; every call waits a bounded time."""

    def __init__(self, name: str, target, args: tuple, start_timeout_s: float):
        ctx = mp.get_context("spawn")  # no fork of a process that may hold native threads
        self.name = name
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child_conn,) + args, daemon=True, name=name)
        self.proc.start()
        self.started = self._reply("start", start_timeout_s)

    def call(self, command: str, *args, timeout: float = 10.0):
        self.conn.send((command, args))
        return self._reply(command, timeout)

    def _reply(self, what: str, timeout: float):
        deadline = time.monotonic() + timeout
        while not self.conn.poll(0.2):
            if not self.proc.is_alive():
                raise BenchError(f"{self.name} exited (code {self.proc.exitcode}) before answering {what}")
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name} did not answer {what} within {timeout} s")
        status, value = self.conn.recv()
        if status != "ok":
            raise BenchError(f"{self.name}: {value}")
        return value

    def close(self, timeout: float = 10.0) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(("quit", ()))
            except OSError:
                pass
            self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


# ---- one N -------------------------------------------------------------------------------------

class Cluster:
    """One controller and the client processes for N ranks."""

    def __init__(self, n: int, opts: Options, log_dir: str):
        self.n, self.opts = n, opts
        self.controller, self.clients, self.ranges = None, [], []
        token = secrets.token_hex(16)
        env = {"MINDIO_TOKEN": token, "MINDIO_FAULT_COLLECT_TIME": str(opts.collect_s)}
        self.log_path = os.path.join(log_dir, f"controller_{n}.log")
        self.controller = Child(f"controller[{n}]", controller_main, (n, env, self.log_path), 30)
        port = self.controller.started
        procs = max(1, min(opts.client_procs, n))
        bounds = [n * k // procs for k in range(procs + 1)]
        for k in range(procs):
            first, count = bounds[k], bounds[k + 1] - bounds[k]
            self.ranges.append(range(first, first + count))
            self.clients.append(Child(f"clients[{first}..{first + count - 1}]", clients_main,
                                      (port, first, count, n, token, opts), 30))

    def close(self) -> None:
        for child in self.clients + [self.controller]:
            if child is not None:
                child.close()

    def owner(self, rank: int) -> Child:
        return next(c for c, r in zip(self.clients, self.ranges) if rank in r)

    def client_errors(self) -> str:
        problems = []
        for child in self.clients:
            _, _, stats, error = child.call("stats")
            if stats["failed"] or stats["closed"]:
                problems.append(f"{child.name}: {stats['failed']} failed, {stats['closed']} closed; first: {error}")
        return "; ".join(problems)

    def wait_registered(self) -> float:
        start = time.monotonic()
        deadline = start + 60 + self.n / 100
        while time.monotonic() < deadline:
            _, _, stats, state = self.controller.call("sample")
            if stats["registered"] == self.n and state == "NORMAL":
                return time.monotonic() - start
            errors = self.client_errors()
            if errors:
                raise BenchError(f"clients failed to register ({stats['registered']}/{self.n} registered): {errors}")
            time.sleep(0.5)
        raise BenchError(f"only {stats['registered']}/{self.n} ranks registered within {deadline - start:.0f} s "
                         f"(controller state {state}); see {self.log_path}")

    def steady(self) -> dict:
        """CPU and heartbeat rates over a window in which nothing but heartbeats happens."""
        c0 = self.controller.call("sample")
        k0 = [child.call("stats") for child in self.clients]
        time.sleep(self.opts.window_s)
        c1 = self.controller.call("sample")
        k1 = [child.call("stats") for child in self.clients]
        wall = c1[0] - c0[0]
        sent = sum(b[2]["heartbeats"] - a[2]["heartbeats"] for a, b in zip(k0, k1))
        return {
            "controller_cpu": (c1[1] - c0[1]) / wall,
            "clients_cpu": sum(b[1] - a[1] for a, b in zip(k0, k1)) / wall,
            "hb_handled": (c1[2]["heartbeats"] - c0[2]["heartbeats"]) / wall,
            "hb_sent": sent / wall,
            "dead": c1[2]["dead"],
        }

    def fault_once(self, rep: int) -> dict:
        """One UCE report -> STOP at every rank; then wait for the repair flow to end in NORMAL."""
        rank = (rep * 7919 + 1) % self.n  # a different rank, and client process, each time
        for child in self.clients:
            child.call("clear")
        reported = self.owner(rank).call("report", rank)
        deadline = reported + self.opts.stop_timeout_s
        while True:
            got = [child.call("stops") for child in self.clients]
            received = sum(g[0] for g in got)
            if received == self.n:
                timed = sum(g[5] for g in got)
                if timed != received:
                    raise BenchError(f"{received - timed} of {received} STOPs came without a kernel receive timestamp")
                break
            if time.monotonic() > deadline:
                raise BenchError(f"only {received}/{self.n} ranks received STOP within {self.opts.stop_timeout_s} s "
                                 f"of rank {rank}'s report; {self.client_errors() or 'no client errors'}")
            time.sleep(0.05)
        result = {"rank": rank, "stops": received, "last": max(g[1] for g in got) - reported,
                  "first": min(g[2] for g in got) - reported, "last_arrival": max(g[3] for g in got) - reported,
                  "first_arrival": min(g[4] for g in got) - reported}
        result["flow"] = self.wait_normal(reported) - reported
        return result

    def wait_normal(self, since: float) -> float:
        deadline = since + self.opts.flow_timeout_s
        while time.monotonic() < deadline:
            now, _, _, state = self.controller.call("sample")
            if state == "NORMAL":
                return now
            if state in ("DUMP", "EXIT", "FINAL"):
                raise BenchError(f"the controller went to {state} instead of repairing online; see {self.log_path}")
            time.sleep(0.05)
        raise BenchError(f"the repair flow did not return to NORMAL within {self.opts.flow_timeout_s} s")


def measure(n: int, opts: Options, log_dir: str) -> dict:
    """Everything the table shows for one N; {'n', 'skipped'} when a limit of this machine prevents it."""
    problem = limit_problem(n, opts)
    if problem:
        return {"n": n, "skipped": problem}
    raise_nofile(n + FD_SLACK)
    cluster = Cluster(n, opts, log_dir)
    try:
        result = {"n": n, "register_s": cluster.wait_registered()}
        time.sleep(opts.heartbeat_s + 0.5)  # past the first, spread-out round of heartbeats
        result.update(cluster.steady())
        result["faults"] = [cluster.fault_once(rep) for rep in range(opts.reps)]
        return result
    finally:
        cluster.close()


# ---- report ------------------------------------------------------------------------------------

def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def latency(result: dict) -> float:
    return statistics.median(f["last_arrival"] for f in result["faults"])


def print_row(r: dict, opts: Options) -> None:
    if "skipped" in r or "error" in r:
        print(f"{r['n']:>6}  not measured: {r.get('skipped') or r.get('error')}")
        return
    lasts = [f["last_arrival"] for f in r["faults"]]
    median = lambda key: statistics.median(f[key] for f in r["faults"])
    print(f"{r['n']:>6}  {r['controller_cpu']:>9.3f}  {r['clients_cpu']:>8.3f}  {r['hb_handled']:>9.0f}  "
          f"{r['hb_sent']:>8.0f}  {ms(latency(r)):>9} [{ms(min(lasts))}..{ms(max(lasts))}]  "
          f"{ms(latency(r) - opts.collect_s):>9}  {ms(median('first_arrival')):>8}  {ms(median('last')):>8}  "
          f"{median('flow'):>7.2f}  {r['register_s']:>6.1f}  {r['dead']:>4}")


def print_table(results: list, opts: Options) -> None:
    print(f"heartbeat period {opts.heartbeat_s} s (reference default 2 s), steady window {opts.window_s} s, "
          f"{opts.reps} fault repetitions, fault-collection window {opts.collect_s} s, "
          f"{opts.client_procs} client processes, replica blocks of {opts.dp_size} ranks (R=2)")
    print(f"machine: {machine_limits()}; the clients share these cores with the controller")
    print(f"{'N':>6}  {'ctrl CPU':>9}  {'cli CPU':>8}  {'hb hand/s':>9}  {'hb sent/s':>8}  "
          f"{'all-STOP ms median [min..max]':>22}  {'-collect':>9}  {'1st STOP':>8}  {'handled':>8}  "
          f"{'flow s':>7}  {'reg s':>6}  {'dead':>4}")
    for r in results:
        print_row(r, opts)
    measured = [r for r in results if "faults" in r]
    if len(measured) >= 2:
        lo, hi = measured[0], measured[-1]
        print(f"latency ratio N={hi['n']}/N={lo['n']} ({hi['n'] // lo['n']}x ranks): "
              f"{latency(hi) / latency(lo):.2f}x total, "
              f"{(latency(hi) - opts.collect_s) / max(latency(lo) - opts.collect_s, 1e-3):.2f}x beyond the "
              f"collection window; controller CPU ratio {hi['controller_cpu'] / max(lo['controller_cpu'], 1e-6):.1f}x")
    print("ctrl CPU / cli CPU: cores busy (CPU s per wall s) of the controller process / all client processes; "
          "all-STOP: UCE report -> the last rank's STOP received (kernel receive timestamp of its socket); "
          "-collect: the same minus the collection window; 1st STOP: median first receipt; handled: median "
          "report -> the last STOP handled by a client thread (adds the simulation's queueing); flow: report -> "
          "controller back in NORMAL after stop, clean, repair, rollback, normal; reg s: time for all N to "
          "register; dead: ranks declared dead")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", default=",".join(str(n) for n in DEFAULT_NS),
                   help="comma-separated rank counts (default %(default)s)")
    p.add_argument("--heartbeat-s", type=float, default=2.0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--window-s", type=float, default=6.0)
    p.add_argument("--client-procs", type=int, default=2)
    p.add_argument("--collect-s", type=float, default=0.5, help="MINDIO_FAULT_COLLECT_TIME for the controller")
    p.add_argument("--dp-size", type=int, default=8, help="ranks per replica block (N must be a multiple)")
    args = p.parse_args(argv)
    ns = [int(x) for x in args.n.split(",") if x.strip()]
    bad = [n for n in ns if n < args.dp_size or n % args.dp_size]
    if bad or args.reps < 1 or args.client_procs < 1 or args.heartbeat_s < 0.05:
        p.error(f"every N must be a positive multiple of --dp-size {args.dp_size} (got {bad}); "
                "--reps and --client-procs >= 1; --heartbeat-s >= 0.05")
    opts = Options(heartbeat_s=args.heartbeat_s, reps=args.reps, window_s=args.window_s,
                   client_procs=args.client_procs, collect_s=args.collect_s, dp_size=args.dp_size)
    return ns, opts


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main(argv=None) -> int:
    ns, opts = parse_args(argv)
    load_before = loadavg()
    results = []
    log_dir = tempfile.mkdtemp(prefix="controller_scale_")  # kept: the controller logs explain a failure
    for n in ns:
        try:
            results.append(measure(n, opts, log_dir))
        except BenchError as e:
            results.append({"n": n, "error": str(e)})
            print_row(results[-1], opts)
    print_table(results, opts)
    print(f"load average (1, 5, 15 min) before: {load_before}, after: {loadavg()}")
    print(f"controller logs: {log_dir}")
    return 0 if all("faults" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
