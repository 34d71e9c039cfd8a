"""`mindio-adaptor demo`: what a newcomer runs first. Its arguments are parsed by the CLI's own parser and each
scenario is run by the demo's own code (cli/demo.scenario, what the command runs after its reference run), in this
process, with the session's uninterrupted run (tests/e2e/conftest.py: the same flags and steps) as the reference
instead of a run of its own; the command itself runs once, refusing what it cannot show."""
import contextlib
import io
import re
import subprocess
import sys

import pytest

from mindio_adaptor.cli import build_parser, demo

pytestmark = pytest.mark.e2e


def scenario(reference_runs, tmp_path, *args):
    """What the demo printed and its exit code."""
    parsed = build_parser().parse_args(["demo", *args, "--workdir", str(tmp_path)])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = demo.scenario(parsed, demo.Timeline(), reference_runs("ha")[0], tmp_path)
    return printed.getvalue(), code


def test_dump_demo_resumes_to_the_uninterrupted_digest(tmp_path, reference_runs):
    """The SIGTERM scenario's path is tested in test_sigterm_dump.py; this is the newcomer's default."""
    out, code = scenario(reference_runs, tmp_path, "--scenario", "dump", "--steps", "8", "--fault-step", "5")
    assert code == 0, out[-3000:]
    assert "fault: firing kill on rank 2 at step 5 (forward)" in out
    assert "the controller lost the connection of rank 2" in out
    assert "detected by the controller: rank" in out  # the first report: rank 2's death or a peer's error
    assert "controller decision: dump" in out
    assert "dump written: iteration 4" in out
    assert "relaunch loaded the checkpoint at iteration 4" in out
    assert "steps lost: 0; the interrupted step is recomputed" in out
    assert "params digest equal to the uninterrupted run: yes" in out


def test_replace_demo_shows_the_replacement_and_ends_on_the_reference_digest(tmp_path, reference_runs):
    out, code = scenario(reference_runs, tmp_path, "--scenario", "replace", "--steps", "8", "--fault-step", "4")
    assert code == 0, out[-3000:]
    assert "fault: firing kill on rank 2 at step 4 (forward)" in out
    assert "controller decision: recover" in out
    assert "the launcher started a new process for the dead rank" in out
    assert "communicators rebuilt, Megatron re-pointed" in out
    assert "state sent: repair of step 3: received my optimizer shard" in out
    assert "controller: ranks [2] replaced, training resumes at step 3" in out
    assert "recovery 1 on rank 2, step 0, a replacement process joining: detected +0.00 s" in out
    assert "recovery 1 on rank 0, step 4," in out and "first step done" in out
    assert "only the killed rank's process restarted" in out
    assert "params digest equal to the uninterrupted run: yes" in out
    assert f"recovery timeline drawn in {tmp_path / 'timeline.svg'}" in out
    svg = (tmp_path / "timeline.svg").read_text()
    lanes = {int(rank) for rank in re.findall(r'id="rank(\d+)-', svg)}
    assert lanes == {0, 1, 2, 3}  # every rank's lane, the replacement's included
    assert 'id="rank2-shard_received"' in svg and 'id="rank0-groups_rebuilt"' in svg
    assert 'id="rank0-first_step_done"' in svg


@pytest.mark.parametrize("args, message", [
    (["--scenario", "replace", "--fault-rank", "0"], "--fault-rank 0 hosts the in-job controller"),
    (["--fault-step", "12", "--steps", "12"], "--fault-step must be in 1..11"),
    (["--fault-rank", "4"], "--fault-rank must be in 0..3"),
    (["--scenario", "dump", "--fault-rank", "0"], "--fault-rank 0 hosts the in-job controller"),
    (["--scenario", "elastic", "--nproc", "2", "--fault-rank", "1"],
     "--scenario elastic runs 4 processes as two nodes"),
    (["--scenario", "elastic", "--steps", "8", "--fault-step", "7"], "--fault-step at most 6"),
])
def test_demo_refuses_what_it_cannot_show(args, message):
    with pytest.raises(SystemExit) as refused:
        demo.run(build_parser().parse_args(["demo", *args]))
    assert message in str(refused.value.code)


def test_the_demo_command_refuses_before_any_run():
    done = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "demo", "--fault-rank", "4"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "mindio-adaptor demo: --fault-rank must be in 0..3" in done.stderr
    assert not done.stdout
