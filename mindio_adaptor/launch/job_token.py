"""The job's token as a launcher holds it: what seals the values the launchers share (core/job/sealed_values), and
what its workers and its controller get as MINDIO_TOKEN. It never passes through a store.

Where it comes from, in this order:
- MINDIO_TOKEN, or --token-file FILE (this user's, readable by this user only): the same on every launcher;
- neither, with the launchers' store on a loopback address (every launcher of the job runs on this host): the
  first launcher makes one and writes it to a file only this user may read, named after the job id; the others
  read it there;
- neither, with the store on any other address: the launcher refuses to start. A token one host made could
  reach the others only through something anybody on the network can read.
"""
from __future__ import annotations

import os
import secrets
import tempfile
from typing import Mapping

from mindio_adaptor.core.job.controller_address import ENV_TOKEN
from mindio_adaptor.core.process.private_files import (NotPrivate, is_loopback, private_dir, read_private_file,
                                                       write_private_file_once)
from mindio_adaptor.launch.config import LaunchConfig, LaunchConfigError

ENV_TOKEN_DIR = "MINDIO_TOKEN_DIR"  # where launchers on one host share a token they made (tests; tmpfs)


def launcher_token(config: LaunchConfig, token_file: str, environ: Mapping[str, str]) -> str:
    given = _given(token_file, environ)
    if given:
        return given
    try:
        local = is_loopback(config.master_addr)
    except ValueError as err:
        raise LaunchConfigError(f"--master-addr {config.master_addr!r}: {err}") from None
    if not local:
        raise LaunchConfigError(
            f"the launchers' store at {config.master_addr} is reachable beyond this machine, and the launchers "
            f"need the job's token to tell their own values there from a stranger's: set {ENV_TOKEN} (the same "
            f"on every node, e.g. from `openssl rand -hex 16`) or --token-file FILE (mode 600)")
    return _shared_on_this_host(config.run_id, environ)


def _given(token_file: str, environ: Mapping[str, str]) -> str:
    token = environ.get(ENV_TOKEN, "")
    if not token_file:
        return token
    try:
        from_file = read_private_file(token_file)
    except NotPrivate as err:
        raise LaunchConfigError(f"--token-file {token_file}: {err}") from None
    if token and token != from_file:
        raise LaunchConfigError(f"--token-file {token_file} and {ENV_TOKEN} give different tokens: give one")
    return from_file


def token_path(run_id: str, environ: Mapping[str, str]) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run_id)
    base = environ.get(ENV_TOKEN_DIR) or os.path.join(tempfile.gettempdir(), f"mindio-tokens-{os.getuid()}")
    return os.path.join(base, f"job-{safe}")


def _shared_on_this_host(run_id: str, environ: Mapping[str, str]) -> str:
    path = token_path(run_id, environ)
    try:
        private_dir(os.path.dirname(path))
        return write_private_file_once(path, secrets.token_hex(16))
    except (NotPrivate, OSError) as err:
        raise LaunchConfigError(f"the job's token could not be shared through {path}: {err}; set {ENV_TOKEN} or "
                                f"--token-file FILE, or {ENV_TOKEN_DIR} to a private directory") from None
