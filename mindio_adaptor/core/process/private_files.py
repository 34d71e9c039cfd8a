"""Files and directories that only this user may read or write: where a secret (the job's token) or a marker
that steers the job (a planned fault's) lives. Anything others could read is no secret, anything others could
write no proof."""
from __future__ import annotations

import ipaddress
import os
import socket
import stat


class NotPrivate(ValueError):
    """The message says what is wrong with the path (not the path's role: the caller names that)."""


def private_dir(path: str) -> str:
    """`path` and its parent, made with mode 700 where missing; NotPrivate unless both are this user's own
    directories that nobody else may write to. A sticky parent (/tmp) is fine: there nobody but this user
    may rename or remove `path`."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        parent = os.path.dirname(path)
        for directory in ((path,) if os.stat(parent).st_mode & stat.S_ISVTX else (parent, path)):
            st = os.lstat(directory)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
                raise NotPrivate(f"{directory!r} is not a directory of yours that only you may write to (mode "
                                 f"{st.st_mode & 0o777:o}, uid {st.st_uid})")
    except OSError as exc:
        raise NotPrivate(f"{path!r} is unusable: {exc}") from exc
    return path


def read_private_file(path: str) -> str:
    """The file's text, stripped, from a file of this user's that nobody else may read."""
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError) as err:
        raise NotPrivate(f"cannot read it ({getattr(err, 'strerror', None) or err})") from None
    if st.st_mode & 0o077 or st.st_uid != os.getuid():
        raise NotPrivate(f"mode {st.st_mode & 0o777:o}, owner uid {st.st_uid}: it must be yours and readable by "
                         f"you only (chmod 600 {path})")
    if not text:
        raise NotPrivate("the file is empty")
    return text


def write_private_file_once(path: str, text: str) -> str:
    """Write `text` to `path` (mode 600) unless the file exists; the file's text either way. Atomic: of several
    processes writing at once, one file wins and every one reads it."""
    scratch = f"{path}.{os.getpid()}"
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    try:
        os.link(scratch, path)  # fails if another process's file is there first
    except FileExistsError:
        pass
    finally:
        os.unlink(scratch)
    return read_private_file(path)


def is_loopback(host: str) -> bool:
    """Whether every address `host` resolves to is a loopback one; ValueError when it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError as err:
        raise ValueError(f"cannot resolve it ({err.strerror or err})") from None
    return all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)
