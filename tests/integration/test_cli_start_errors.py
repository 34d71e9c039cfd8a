"""Start-up errors of the command line: one line on stderr naming the value and the fix, exit 2, no
traceback, and no "listening" line on stdout (a parent reading it would take the controller as started)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def cli(*args, env=None, cwd=None):
    path = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p)
    environ = {k: v for k, v in os.environ.items() if k not in ("MINDIO_TOKEN", "MINDIO_STATUS_PORT")}
    return subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", *args], capture_output=True, text=True,
                          timeout=120, env=dict(environ, PYTHONPATH=path, **(env or {})), cwd=cwd)


def one_line_error(result, *words):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "listening" not in result.stdout and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


@pytest.mark.parametrize("flags, words", [
    (["--world-size", "2", "--port", "0", "--status-port", "99999"], ["--status-port 99999", "0..65535"]),
    (["--world-size", "2000000000", "--port", "0"], ["--world-size 2000000000", "1..1048576"]),
    (["--world-size", "2e9", "--port", "0"], ["--world-size '2e9'", "whole number"]),
    (["--world-size", "2", "--port", "70000"], ["--port 70000"]),
    (["--world-size", "2", "--port", "0", "--host", "0.0.0.0"], ["--host 0.0.0.0", "MINDIO_TOKEN", "--token-file",
                                                                  "127.0.0.1"]),
    (["--world-size", "2", "--port", "0", "--status-port", "0"], ["--status-port 0", "token"]),
])
def test_controller_start_errors(flags, words):
    one_line_error(cli("controller", *flags), *words)


def test_a_token_file_others_can_read_is_refused(tmp_path):
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o644)
    one_line_error(cli("controller", "--world-size", "2", "--port", "0", "--host", "0.0.0.0", "--token-file",
                       str(token)), str(token), "chmod 600")


def test_a_controller_with_a_private_token_file_listens_beyond_loopback(tmp_path):
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o600)
    path = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p)
    proc = subprocess.Popen([sys.executable, "-m", "mindio_adaptor.cli", "controller", "--world-size", "2", "--port",
                             "0", "--host", "0.0.0.0", "--token-file", str(token)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=path))
    try:
        assert "listening on 0.0.0.0:" in proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_deep_policy_file_is_one_line(tmp_path):
    deep = tmp_path / "faultCode.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = cli("policy", "check", str(deep))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert "nested too deeply" in result.stderr


def test_timeline_without_matplotlib_names_the_extra(tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "matplotlib.py").write_text("raise ImportError('hidden by the test')\n")
    log = tmp_path / "rank0.log"
    log.write_text("")
    path = os.pathsep.join([str(hide), str(REPO)])
    result = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "timeline", str(log), "-o",
                             str(tmp_path / "t.svg")], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=path))
    one_line_error(result, "matplotlib", "pip install 'mindio_adaptor[timeline]'")


def test_a_malformed_controller_address_is_reported_at_launch():
    result = cli("launch", "--nproc-per-node", "1", "--no-python", "true", env={"MINDIO_CONTROLLER_ADDR": "nohost"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "MINDIO_CONTROLLER_ADDR='nohost'" in result.stderr.strip().splitlines()[-1]
