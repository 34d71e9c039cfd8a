"""`mindio-adaptor status --controller HOST:PORT`: the controller's status page as a table in the terminal
(read from its /status.json; the job's token from --token or MINDIO_TOKEN; over HTTPS with the job's certificate
when MINDIO_TLS_CERT, MINDIO_TLS_KEY and MINDIO_TLS_CA are set: core/job/tls_config)."""
from mindio_adaptor.cli.status_client import add_server_arguments, request_json, token_of
from mindio_adaptor.status.goodput import goodput_line


def register(subparsers):
    p = subparsers.add_parser("status", help="print a running job's status from its controller's status server")
    add_server_arguments(p)
    p.set_defaults(func=run)


def fetch_status(address: str, token: str) -> dict:
    return request_json(address, token, "/status.json")


def status_table(status: dict) -> str:
    health = ", ".join(f"{n} {h}" for h, n in status["health"].items() if n)
    lines = [f"controller {status['state']}, {len(status['ranks'])} ranks ({health}), term {status['term']}, "
             f"last event at +{status['last_event_s']:.1f} s", "",
             f"{'rank':>4}  {'health':<12}  {'step':>6}  {'heard':>8}  {'node':<16}  flags"]
    lines += [f"{r['rank']:>4}  {r['health']:<12}  {r['step']:>6}  {_heard(r):>8}  {r['domain'] or '-':<16}  "
              f"{', '.join(r['flags'])}" for r in status["ranks"]]
    lines += ["", *layout_lines(status["shards"], status.get("dp_size"))]
    lines += ["", *scaling_lines(status.get("scaling", []), status.get("scale_out_note", ""))]
    lines += ["", "recoveries:" if status["recoveries"] else "recoveries: none"]
    for r in status["recoveries"]:
        took = "-" if r["duration_s"] is None else f"{r['duration_s']:.2f} s"
        resized = f", {r['resized']}" if r.get("resized") else ""
        lines.append(f"  #{r['number']} {r['strategy']} at +{r['started_s']:.1f} s, took {took}, {r['outcome']}"
                     f"{resized} ({', '.join(r['faults']) or 'no fault reported'})")
    faults = ", ".join(f"{k} {n}" for k, n in sorted(status["faults_by_kind"].items())) or "none"
    decisions = ", ".join(f"{k} {n}" for k, n in sorted(status["decisions_by_strategy"].items())) or "none"
    lines += [f"faults: {faults}", f"decisions: {decisions}"]
    if status.get("goodput"):
        lines.append(goodput_line(status["goodput"]))
    return "\n".join(lines)


def layout_lines(shards: list, dp_size=None) -> list:
    """The replica layout in a few lines: how many shards, the data-parallel size, and only the shards that
    need a look (a node holding more than one copy, a copy lost)."""
    if not shards:
        return ["replica layout: not reported"]
    size = f" (data-parallel size {dp_size})" if dp_size is not None else ""
    lines = [f"replica layout: {len(shards)} shards, {len(shards[0]['holders'])} copies each{size}"]
    for shard in shards:
        if shard["notes"]:
            lines.append(f"  optimizer {shard['optimizer_type']} list {shard['group']} shard {shard['shard']} "
                         f"(holders {shard['holders']}): {'; '.join(shard['notes'])}")
    return lines


def scaling_lines(scaling: list, scale_out_note: str) -> list:
    """Each scale-in and scale-out (elastic training): sizes, step, time, ranks, why, how it ended."""
    lines = ["scaling:" if scaling else "scaling: none"]
    for event in scaling:
        lines.append(f"  #{event['number']} {event['direction']} {event['sizes']} after step {event['after_step']} "
                     f"at +{event['at_s']:.1f} s: {_scaled_ranks(event)}; {event['outcome']}")
    if scale_out_note:
        lines.append(f"  scale-out: {scale_out_note}")
    return lines


def _scaled_ranks(event: dict) -> str:
    if event["direction"] == "out":
        return event["why"]
    left = f", ranks {event['left_with_slice']} left with their slices" if event["left_with_slice"] else ""
    return f"ranks {event['lost']} lost{left} ({event['why']})"


def _heard(rank: dict) -> str:
    lag = rank.get("heartbeat_lag_s")
    return "-" if lag is None else f"{lag:.1f} s"


def run(args) -> int:
    print(status_table(fetch_status(args.controller, token_of(args))))
    return 0
