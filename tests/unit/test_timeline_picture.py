"""status/timeline_picture and `mindio-adaptor timeline`: recovery lines read from mixed logs, drawn as one
lane per rank with one bar per phase; the SVG is checked from its text and its bars' ids."""
import re
import subprocess
import sys

import pytest

from mindio_adaptor.status.timeline_picture import parse_line, phases, read_recoveries

RANK0 = ("[mindio 06:40:01.500 rank 0] INFO recovery 1 on rank 0, step 4, stopped by the controller: detected +0.00 s, "
         "stopped +0.12 s, groups rebuilt +0.70 s (epoch 1), rolled back +1.10 s (to step 3), resumed +1.20 s, "
         "first step done +1.50 s; first step done")
RANK1 = ("[mindio 06:40:01.400 rank 1] INFO recovery 1 on rank 1, step 4, UCE fault: detected +0.00 s, stopped +0.05 s, "
         "groups rebuilt +0.72 s (epoch 1), shard received +0.95 s (1400000 bytes from rank 3 in 0.20 s), "
         "rolled back +1.12 s (to step 3), resumed +1.21 s, first step done +1.52 s; first step done")
SUMMARY = "[mindio 06:40:01.400 rank 1] INFO   " + RANK1.split("INFO ")[1]  # the end-of-run summary repeats it


@pytest.fixture
def logs(tmp_path):
    (tmp_path / "rank0.log").write_text(f"unrelated\n{RANK0}\n")
    (tmp_path / "rank1.log").write_text(f"{RANK1}\nrank 1: 1 recovery(ies) in this run\n{SUMMARY}\n")
    return [tmp_path / "rank0.log", tmp_path / "rank1.log"]


def test_a_line_gives_the_marks_and_when_the_rank_detected_the_fault():
    recovery = parse_line(RANK1)
    assert (recovery.number, recovery.rank, recovery.step, recovery.cause) == (1, 1, 4, "UCE fault")
    assert recovery.marks[3] == ("shard received", 0.95, "1400000 bytes from rank 3 in 0.20 s")
    assert recovery.outcome == "first step done"
    assert recovery.started_at_s == pytest.approx(6 * 3600 + 40 * 60 + 1.4 - 1.52)
    assert phases(recovery)[0] == ("stopped", 0.0, 0.05)
    assert parse_line("recovery 1 on rank 0, step 2, x: no marks here; y") is None


def test_every_rank_once_per_recovery(logs):
    by_number = read_recoveries(logs)
    assert list(by_number) == [1] and [r.rank for r in by_number[1]] == [0, 1]


def test_the_svg_has_a_lane_per_rank_and_a_bar_per_phase(logs, tmp_path):
    out = tmp_path / "timeline.svg"
    done = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "timeline", *map(str, logs), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1 recovery(ies), 2 rank lane(s)" in done.stdout
    svg = out.read_text()
    assert set(re.findall(r'id="(rank\d+-[a-z_]+)"', svg)) == {
        "rank0-stopped", "rank0-groups_rebuilt", "rank0-rolled_back", "rank0-resumed", "rank0-first_step_done",
        "rank1-stopped", "rank1-groups_rebuilt", "rank1-shard_received", "rank1-rolled_back", "rank1-resumed",
        "rank1-first_step_done"}
    assert "rank 0" in svg and "rank 1" in svg and "recovery 1 at step 4" in svg


def test_a_png_is_an_image(logs, tmp_path):
    out = tmp_path / "timeline.png"
    subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "timeline", *map(str, logs), "-o", str(out)],
                   check=True, capture_output=True, timeout=120)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    (["-o", "t.pdf"], "-o t.pdf: the picture must end in .svg or .png"),
    (["-o", "t.svg", "--", "missing.log"], "no such log file: missing.log"),
])
def test_bad_arguments_are_named(tmp_path, args, message):
    (tmp_path / "empty.log").write_text("nothing\n")
    files = [] if "missing.log" in args else ["empty.log"]
    done = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "timeline", *files, *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and message in done.stderr


def test_logs_without_a_recovery_say_so(tmp_path):
    (tmp_path / "empty.log").write_text("nothing\n")
    done = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "timeline", "empty.log", "-o", "t.svg"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no recovery line" in done.stderr and not (tmp_path / "t.svg").exists()


def test_the_critical_path_names_the_last_rank_at_each_milestone_and_the_longest_wait(logs, tmp_path):
    from mindio_adaptor.status.critical_path import critical_path, describe

    ranks = read_recoveries(logs)[1]
    path = critical_path(ranks)  # rank 0 detected 0.12 s after rank 1 (wall clock of its line)
    assert [(m.event, m.rank) for m in path] == [
        ("detected", 0), ("stopped", 0), ("groups rebuilt", 0), ("shard received", 1), ("rolled back", 0),
        ("resumed", 0), ("first step done", 0)]
    assert [m.at_s for m in path] == pytest.approx([0.12, 0.24, 0.82, 0.95, 1.22, 1.32, 1.62])
    assert [m.waited_s for m in path] == pytest.approx([0.12, 0.12, 0.58, 0.13, 0.27, 0.10, 0.30])
    text = describe(1, ranks)
    assert text.startswith("recovery 1 at step 4: 1.62 s from the first detection to the last first step done")
    assert re.search(r"groups rebuilt\s+\+\s*0\.82 s\s+rank 0\s+waited\s+0\.58 s  <- longest wait", text)
    done = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "timeline", *map(str, logs), "-o",
                           str(tmp_path / "t.svg")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "<- longest wait" in done.stdout and "shard received" in done.stdout
