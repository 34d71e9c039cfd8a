"""The controller's status over real HTTP while a real controller repairs a fault of real processor
processes: the page, /metrics (Prometheus text, parsed with prometheus_client's own parser) and
/status.json move as the job does; a request without the job's token is refused; the terminal table of
`mindio-adaptor status` says the same; a scale-in (elastic training) shows in all three."""
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller_harness import Job, wait_until
from mindio_adaptor.status.controller_source import controller_status
from mindio_adaptor.status.server import StatusServer

pytestmark = pytest.mark.integration

TOKEN = "status-test-token"


def get(server, path, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request("http://%s:%d%s" % (*server.address, path), headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status, answer.headers["Content-Type"], answer.read().decode()


def metrics(server) -> dict:
    """(name, labels as a sorted tuple) -> value"""
    _, content_type, text = get(server, "/metrics")
    assert content_type.startswith("text/plain; version=0.0.4")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
def job(tmp_path, job_env, monkeypatch):
    monkeypatch.setenv("MINDIO_TOKEN", TOKEN)
    job = Job(tmp_path, 4, fail_rank=1)
    yield job
    job.close()


def test_status_page_and_metrics_follow_a_repaired_fault(job):
    server = StatusServer(controller_status, TOKEN).start()
    try:
        job.wait_ready()
        before = metrics(server)
        assert before[("mindio_ranks", (("health", "healthy"),))] == 4
        assert before[("mindio_controller_state", (("state", "NORMAL"),))] == 1
        assert not [k for k in before if k[0].startswith("mindio_recoveries")]
        assert before[("mindio_controller_heartbeats_total", ())] >= 0
        assert before[("mindio_controller_term", ())] == 1
        assert before[("mindio_shards", (("live_copies", "2"),))] == 2  # dp4, 2 copies: shards {0, 2}, {1, 3}
        assert before[("mindio_shards_sharing_a_node", ())] == 0  # no rank said its node
        lags = [before[("mindio_rank_heartbeat_lag_seconds", (("rank", str(r)),))] for r in range(4)]
        assert all(0 <= lag < 5 for lag in lags), lags  # heard from within a few of its 0.2 s periods
        job.fire()
        job.wait_results(range(4))
        # after the repair each worker trains 5 more steps, then leaves (tft_destroy_processor)
        wait_until(lambda: controller_status().health_counts()["left"] == 4, 30, "every rank to finish and leave")
        after = metrics(server)
        assert after[("mindio_faults_total", (("kind", "memory"),))] == 1
        assert after[("mindio_decisions_total", (("strategy", "retry"),))] == 1
        assert after[("mindio_recoveries_total", (("outcome", "training goes on"), ("strategy", "retry")))] == 1
        assert after[("mindio_recovery_seconds_count", (("strategy", "retry"),))] == 1
        assert 0 < after[("mindio_recovery_seconds_sum", (("strategy", "retry"),))] < 30
        assert after[("mindio_controller_heartbeats_total", ())] > before[("mindio_controller_heartbeats_total", ())]
        assert [after[("mindio_rank_step", (("rank", str(r)),))] for r in range(4)] == [10, 10, 10, 10]
        assert after[("mindio_ranks", (("health", "left"),))] == 4 and after[("mindio_ranks", (("health", "healthy"),))] == 0
        assert not [k for k in after if k[0] == "mindio_rank_heartbeat_lag_seconds"]  # none connected any more

        status = json.loads(get(server, "/status.json")[2])
        assert status["state"] == "NORMAL" and status["health"]["left"] == 4 and status["term"] == 1
        assert [shard["holders"] for shard in status["shards"]] == [[0, 2], [1, 3]]
        assert [(r["number"], r["strategy"], r["outcome"], r["faults"]) for r in status["recoveries"]] == \
            [(1, "retry", "training goes on", ["rank 1 memory"])]

        code, content_type, page = get(server, "/")
        assert code == 200 and content_type.startswith("text/html")
        assert "Controller NORMAL" in page and "4 left" in page and "rank 1 memory" in page

        table = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "status", "--controller",
                                "%s:%d" % server.address, "--token", TOKEN], capture_output=True, text=True, timeout=60)
        assert table.returncode == 0, table.stderr
        assert "controller NORMAL, 4 ranks (4 left), term 1," in table.stdout
        assert "replica layout: 2 shards, 2 copies each" in table.stdout
        assert "shard 1 (holders [1, 3]): 0 of 2 copies alive" in table.stdout  # every rank has left
        assert "#1 retry at +" in table.stdout and "training goes on (rank 1 memory)" in table.stdout
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        server.stop()


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_a_request_without_the_jobs_token_is_refused(job, token):
    server = StatusServer(controller_status, TOKEN).start()
    try:
        for path in ("/", "/metrics", "/status.json"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                get(server, path, token)
            assert refused.value.code == 401
            assert b"needs the job's token" in refused.value.read()
        assert get(server, "/?token=" + TOKEN, token=None)[0] == 200  # a browser passes it in the URL
        table = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "status", "--controller",
                                "%s:%d" % server.address, "--token", token or "x"], capture_output=True, text=True,
                               timeout=60)
        assert table.returncode != 0 and "401" in table.stderr
    finally:
        server.stop()


def test_a_scale_in_shows_in_the_metrics_json_and_table(tmp_path, job_env, monkeypatch):
    """Elastic training, dp4 R=2: rank 3 is lost and not replaced within MINDIO_ARF_WAIT_S, and the job
    scales in to dp3 (the survivors report the layout at dp3): the data-parallel size, the scale event and the
    recovery that became the scale-in."""
    monkeypatch.setenv("MINDIO_TOKEN", TOKEN)
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", "1.5")
    job = Job(tmp_path, 4, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5, relayout=1, idle_s=10)
    server = StatusServer(controller_status, TOKEN).start()
    try:
        job.wait_ready()
        before = metrics(server)
        assert before[("mindio_data_parallel_size", ())] == 4
        assert before[("mindio_scale_events_total", (("direction", "in"),))] == 0
        job.procs[3].send_signal(signal.SIGKILL)
        wait_until(lambda: controller_status().dp_size == 3 and controller_status().state == "NORMAL", 30,
                   "training at dp3")
        after = metrics(server)
        assert after[("mindio_data_parallel_size", ())] == 3
        assert after[("mindio_scale_events_total", (("direction", "in"),))] == 1
        status = json.loads(get(server, "/status.json")[2])
        [event] = status["scaling"]
        assert (event["direction"], event["sizes"], event["lost"], event["after_step"], event["outcome"]) == \
            ("in", "dp4 -> dp3", [3], 5, "training goes on"), event
        assert [(r["strategy"], r["resized"]) for r in status["recoveries"]] == [("recover -> scale_in", "dp4 -> dp3")]
        assert status["ranks"][3]["health"] == "retired" and status["health"]["dead"] == 0
        table = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "status", "--controller",
                                "%s:%d" % server.address, "--token", TOKEN], capture_output=True, text=True, timeout=60)
        assert table.returncode == 0, table.stderr
        assert "(data-parallel size 3)" in table.stdout
        assert "  #1 in dp4 -> dp3 after step 5 at +" in table.stdout
        assert "ranks [3] lost (process replacement timed out after 1500 ms (MINDIO_ARF_WAIT_S)" in table.stdout
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        server.stop()
        job.close()


def test_the_token_stays_out_of_addresses_and_headers_say_no_version():
    """?token= is answered with a cookie and a page whose refresh carries no token; the cookie and a
    lower-case `bearer` are accepted; the Server header names no Python version."""
    from mindio_adaptor.status.job_status import job_status

    server = StatusServer(lambda: job_status("NORMAL", [], [], {}), TOKEN).start()
    base = "http://%s:%d" % server.address
    try:
        with urllib.request.urlopen(f"{base}/?token={TOKEN}", timeout=10) as answer:
            page, cookie, server_header = answer.read().decode(), answer.headers["Set-Cookie"], answer.headers["Server"]
        assert TOKEN not in page and "url=/'" in page
        assert cookie.startswith(f"mindio_token={TOKEN};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert server_header == "mindio-status" and "Python" not in server_header
        for headers in ({"Cookie": f"mindio_token={TOKEN}"}, {"Authorization": f"bearer {TOKEN}"},
                        {"Authorization": f"BEARER  {TOKEN}"}):
            request = urllib.request.Request(f"{base}/status.json", headers=headers)
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 200, headers
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{base}/", headers={"Cookie": "mindio_token=nope"}),
                                   timeout=10)
        assert refused.value.code == 401
    finally:
        server.stop()
