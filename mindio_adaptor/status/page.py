"""The status page: one self-contained HTML document (no script, no external resource), refreshed by
the browser every few seconds."""
from html import escape

from mindio_adaptor.status.goodput import USES
from mindio_adaptor.status.job_status import JobStatus

REFRESH_S = 3
MAX_SHARD_ROWS = 64  # beyond this many shards, the layout table lists only those that need a look
_COLOURS = {"healthy": "#2e7d32", "suspect": "#ef6c00", "disconnected": "#ef6c00", "joining": "#1565c0", "retired": "#6d4c41",
            "dead": "#c62828", "left": "#616161", "finished": "#616161", "unregistered": "#9e9e9e"}
_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 1.5em; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
.pill { display: inline-block; padding: 0.1em 0.6em; border-radius: 0.8em; color: white; margin-right: 0.4em; }
"""


def status_page(status: JobStatus) -> str:
    # The refresh reloads "/" without the token: the browser holds it in a cookie (status/server.py), so
    # it never sits in an address that history, proxies or a shoulder can read.
    refresh = f"{REFRESH_S}; url=/"
    return "\n".join([
        "<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
        f"<meta http-equiv='refresh' content='{escape(refresh)}'>",
        "<title>mindio_adaptor: job status</title>", f"<style>{_STYLE}</style></head><body>",
        f"<h1>Controller {escape(status.state)} (term {status.term}) &middot; {len(status.ranks)} ranks &middot; "
        f"{_dp_size(status)}last event at +{status.last_event_s:.1f} s</h1>",
        _health_pills(status), "<h2>Ranks</h2>", _rank_table(status), "<h2>Replica layout</h2>",
        _layout_table(status), "<h2>Scaling</h2>", _scaling_table(status), "<h2>Recoveries</h2>",
        _recovery_table(status), "<h2>Faults and decisions</h2>", _counts_table(status),
        "<h2>Where the time went</h2>", _goodput_table(status), "</body></html>"])


def _pill(health: str, text: str) -> str:
    return f"<span class='pill' style='background:{_COLOURS[health]}'>{escape(text)}</span>"


def _health_pills(status: JobStatus) -> str:
    counts = status.health_counts()
    return "<p>" + "".join(_pill(h, f"{n} {h}") for h, n in counts.items() if n) + "</p>"


def _rank_table(status: JobStatus) -> str:
    rows = [f"<tr><td>{r.rank}</td><td>{_pill(r.health, r.health)}</td><td>{r.step}</td><td>{_lag(r)}</td>"
            f"<td>{escape(r.domain or '-')}</td><td>{escape(', '.join(r.flags))}</td></tr>" for r in status.ranks]
    return ("<table><tr><th>rank</th><th>health</th><th>last step</th><th>last heard</th><th>node</th>"
            "<th>flags</th></tr>" + "".join(rows) + "</table>")


def _layout_table(status: JobStatus) -> str:
    """Each shard with its holders and their nodes; a node holding several copies of one shard is
    named, since losing it loses them all. A large job lists only the shards that need a look."""
    if not status.shards:
        return "<p>not reported</p>"
    domain = {r.rank: r.domain for r in status.ranks}
    noted = [(shard, "; ".join(shard.notes())) for shard in status.shards]
    shown = noted if len(noted) <= MAX_SHARD_ROWS else [(shard, note) for shard, note in noted if note]
    rows = []
    for shard, note in shown:
        holders = ", ".join(f"{h} ({escape(domain.get(h) or '?')})" for h in shard.holders)
        rows.append(f"<tr><td>{shard.optimizer_type}</td><td>{shard.group}</td><td>{shard.shard}</td>"
                    f"<td>{holders}</td><td>{escape(note) or 'spread'}</td></tr>")
    hidden = len(noted) - len(shown)
    more = f"<p>{hidden} more shards: copies on distinct nodes, every copy alive</p>" if hidden else ""
    return ("<table><tr><th>optimizer</th><th>list</th><th>shard</th><th>holders (node)</th><th>note</th></tr>"
            + "".join(rows) + "</table>" + more)


def _dp_size(status: JobStatus) -> str:
    return "" if status.dp_size is None else f"data-parallel size {status.dp_size} &middot; "


def _scaling_table(status: JobStatus) -> str:
    """Each scale-in and scale-out (elastic training), and the controller's word on a scale-out to come."""
    note = f"<p>scale-out: {escape(status.scale_out_note)}</p>" if status.scale_out_note else ""
    if not status.scaling:
        return "<p>none</p>" + note
    rows = []
    for e in status.scaling:
        ranks = (f"returned {e.returned}" if e.direction == "out" else f"lost {e.lost}" +
                 (f", left with their slices {e.left_with_slice}" if e.left_with_slice else ""))
        rows.append(f"<tr><td>{e.number}</td><td>{e.direction}</td><td>{escape(e.sizes)}</td><td>{e.after_step}</td>"
                    f"<td>+{e.at_s:.1f} s</td><td>{escape(ranks)}</td><td>{escape(e.why)}</td>"
                    f"<td>{escape(e.outcome)}</td></tr>")
    return ("<table><tr><th>#</th><th>direction</th><th>size</th><th>after step</th><th>at</th><th>ranks</th>"
            "<th>why</th><th>outcome</th></tr>" + "".join(rows) + "</table>" + note)


def _lag(rank) -> str:
    if rank.heartbeat_lag_s is None:
        return "-"
    return f"{rank.heartbeat_lag_s:.1f} s ago (beats every {rank.heartbeat_period_s:g} s)"


def _recovery_table(status: JobStatus) -> str:
    if not status.recoveries:
        return "<p>none</p>"
    rows = []
    for r in status.recoveries:
        took = "-" if r.duration_s is None else f"{r.duration_s:.2f} s"
        outcome = f"{r.outcome}, {r.resized}" if r.resized else r.outcome
        rows.append(f"<tr><td>{r.number}</td><td>{escape(r.strategy)}</td><td>{escape(', '.join(r.faults))}</td>"
                    f"<td>+{r.started_s:.1f} s</td><td>{took}</td><td>{escape(outcome)}</td></tr>")
    return ("<table><tr><th>#</th><th>strategy</th><th>faults</th><th>at</th><th>took</th><th>outcome</th></tr>"
            + "".join(rows) + "</table>")


def _counts_table(status: JobStatus) -> str:
    rows = [f"<tr><td>fault</td><td>{escape(k)}</td><td>{n}</td></tr>" for k, n in sorted(status.faults_by_kind.items())]
    rows += [f"<tr><td>decision</td><td>{escape(k)}</td><td>{n}</td></tr>"
             for k, n in sorted(status.decisions_by_strategy.items())]
    if not rows:
        return "<p>none</p>"
    return "<table><tr><th>what</th><th>kind</th><th>count</th></tr>" + "".join(rows) + "</table>"


def _goodput_table(status: JobStatus) -> str:
    """The controller's goodput ledger: each use's seconds and share of the wall time (status/goodput)."""
    if not status.goodput or status.goodput["wall_s"] <= 0:
        return "<p>not accounted yet</p>"
    wall, uses = status.goodput["wall_s"], status.goodput["uses"]
    rows = [f"<tr><td>{use.replace('_', '-')}</td><td>{uses[use]:.1f} s</td><td>{uses[use] / wall:.1%}</td></tr>"
            for use in USES]
    return ("<table><tr><th>use</th><th>time</th><th>share</th></tr>" + "".join(rows)
            + f"<tr><th>wall</th><th>{wall:.1f} s</th><th>100%</th></tr></table>")
