"""The job's status in the Prometheus text format, through prometheus_client: a collector that reads a
fresh JobStatus at every scrape, so the numbers are the controller's at that moment."""
from typing import Callable

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.exposition import generate_latest

from mindio_adaptor.status.job_status import JobStatus

# The controller's own counters (controller_stats()), as counters of the same meaning.
COUNTERS = {
    "heartbeats": "heartbeats the controller processed",
    "frames": "protocol frames the controller received",
    "accepted": "connections the controller accepted",
    "rejected_frames": "frames the controller refused as malformed",
    "refused_registrations": "registrations refused (wrong token, unknown rank, duplicate)",
}


class JobCollector:
    def __init__(self, source: Callable[[], JobStatus]):
        self.source = source

    def collect(self):
        status = self.source()
        yield _state(status)
        yield GaugeMetricFamily("mindio_controller_term", "the controller's term: 1 for the first, one more for "
                                "each takeover", value=status.term)
        yield from _layout(status)
        yield from _scaling(status)
        yield _ranks(status)
        yield _steps(status)
        yield _heartbeat_lags(status)
        yield _labelled_counter("mindio_faults", "faults the controller saw, by kind", "kind", status.faults_by_kind)
        yield _labelled_counter("mindio_decisions", "the controller's decisions, by strategy", "strategy",
                                status.decisions_by_strategy)
        yield from _recoveries(status)
        yield from _goodput(status)
        for name, help_text in COUNTERS.items():
            if name in status.counters:
                yield CounterMetricFamily(f"mindio_controller_{name}", help_text, value=status.counters[name])


def _goodput(status: JobStatus):
    if status.goodput is None:
        return
    yield CounterMetricFamily("mindio_wall_seconds", "the job's wall time as the controller accounted it",
                              value=status.goodput["wall_s"])
    family = CounterMetricFamily("mindio_goodput_seconds", "the job's wall time by use (they add up to "
                                 "mindio_wall_seconds): productive, start_up, saving, stalled, paused, recovering, "
                                 "recomputed", labels=["use"])
    for use, seconds in sorted(status.goodput["uses"].items()):
        family.add_metric([use], seconds)
    yield family


def _state(status: JobStatus) -> GaugeMetricFamily:
    family = GaugeMetricFamily("mindio_controller_state", "1 for the controller's current state", labels=["state"])
    family.add_metric([status.state], 1)
    return family


def _layout(status: JobStatus):
    by_copies = GaugeMetricFamily("mindio_shards", "optimizer shards by how many of their copies are alive",
                                  labels=["live_copies"])
    counts = {}
    for shard in status.shards:
        counts[len(shard.live_holders)] = counts.get(len(shard.live_holders), 0) + 1
    for live, count in sorted(counts.items()):
        by_copies.add_metric([str(live)], count)
    yield by_copies
    yield GaugeMetricFamily("mindio_shards_sharing_a_node", "optimizer shards with more than one copy on one node "
                            "(losing that node loses those copies)", value=sum(1 for s in status.shards
                                                                                if s.shared_domains))


def _scaling(status: JobStatus):
    if status.dp_size is not None:
        yield GaugeMetricFamily("mindio_data_parallel_size", "the data-parallel size of the replica layout the "
                                "ranks reported last", value=status.dp_size)
    by_direction = {"in": 0, "out": 0}
    for event in status.scaling:
        by_direction[event.direction] += 1
    yield _labelled_counter("mindio_scale_events", "scale-ins and scale-outs the controller began (elastic "
                            "training), by direction", "direction", by_direction)


def _ranks(status: JobStatus) -> GaugeMetricFamily:
    family = GaugeMetricFamily("mindio_ranks", "ranks by health", labels=["health"])
    for health, count in status.health_counts().items():
        family.add_metric([health], count)
    return family


def _steps(status: JobStatus) -> GaugeMetricFamily:
    family = GaugeMetricFamily("mindio_rank_step", "the last step each rank reported complete", labels=["rank"])
    for rank in status.ranks:
        family.add_metric([str(rank.rank)], rank.step)
    return family


def _heartbeat_lags(status: JobStatus) -> GaugeMetricFamily:
    family = GaugeMetricFamily("mindio_rank_heartbeat_lag_seconds", "since the controller last heard from each "
                               "connected rank (a heartbeat or any other message)", labels=["rank"])
    for rank in status.ranks:
        if rank.heartbeat_lag_s is not None:
            family.add_metric([str(rank.rank)], rank.heartbeat_lag_s)
    return family


def _labelled_counter(name: str, help_text: str, label: str, counts: dict) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help_text, labels=[label])
    for value, count in sorted(counts.items()):
        family.add_metric([value], count)
    return family


def _recoveries(status: JobStatus):
    done = CounterMetricFamily("mindio_recoveries", "recoveries by strategy and outcome",
                               labels=["strategy", "outcome"])
    seconds = SummaryMetricFamily("mindio_recovery_seconds", "duration of the finished recoveries, fault to "
                                  "NORMAL (or to the end of the job)", labels=["strategy"])
    outcomes, durations = {}, {}
    for recovery in status.recoveries:
        key = (recovery.strategy, recovery.outcome)
        outcomes[key] = outcomes.get(key, 0) + 1
        if recovery.duration_s is not None:
            durations.setdefault(recovery.strategy, []).append(recovery.duration_s)
    for (strategy, outcome), count in sorted(outcomes.items()):
        done.add_metric([strategy, outcome], count)
    for strategy, values in sorted(durations.items()):
        seconds.add_metric([strategy], count_value=len(values), sum_value=sum(values))
    yield done
    yield seconds


def metrics_text(source: Callable[[], JobStatus]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(source))
    return generate_latest(registry)

