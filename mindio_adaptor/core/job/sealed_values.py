"""Values in the job's stores, sealed with the job's token.

A torch TCPStore has no authentication: whoever reaches its port reads and writes every key. What the
launchers and the workers act on there (a node's owner, a lifeline, a controller's address, that the job
ends, a fact a replacement unpickles) is therefore sealed: the value, then an HMAC-SHA256 of (scope, key,
value) under the job's token. A value written without the token is told apart and never acted on; a sealed
value is valid only under the key and in the scope (the job) it was written for, so it cannot be moved to
another key. The token itself is never written to a store.

Counters that only `add()` moves (a beat, how many launchers joined) cannot be sealed: a stranger's add can
make a silent node look alive a while longer, never make a live one look lost (docs/security.md).
"""
from __future__ import annotations

import hashlib
import hmac
import time
from datetime import timedelta
from typing import Callable, Dict, List, Optional, Union

MAC_CHARS = 32  # 128 bits of the HMAC, in hex
_SEPARATOR = b"\n"
WAIT_POLL_S = 0.05

Value = Union[str, bytes]


class UnsealedValue(ValueError):
    """A value under `key` that was not sealed with the job's token (a stranger wrote it, or another job)."""

    def __init__(self, key: str, why: str):
        super().__init__(f"the value under '{key}' {why}: it was not written with the job's token, and is ignored")
        self.key = key


def _bytes(value: Value) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _mac(token: str, scope: str, key: str, value: bytes) -> bytes:
    message = b"\0".join([scope.encode(), key.encode(), value])
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()[:MAC_CHARS].encode()


def seal(token: str, scope: str, key: str, value: Value) -> bytes:
    data = _bytes(value)
    return data + _SEPARATOR + _mac(token, scope, key, data)


def unseal(token: str, scope: str, key: str, sealed: bytes) -> bytes:
    """The value sealed under `key`; UnsealedValue when it is not (compared in constant time)."""
    data, separator, mac = sealed.rpartition(_SEPARATOR)
    if not separator:
        raise UnsealedValue(key, "carries no seal")
    if not hmac.compare_digest(mac, _mac(token, scope, key, data)):
        raise UnsealedValue(key, "carries a seal that does not match")
    return data


class SealedStore:
    """A torch.distributed Store whose values are sealed: set/get/compare_set seal and check them. A stranger
    can still write over a value (the store lets anybody): then the last sealed value this process wrote or
    read under that key stands, and a key it never saw sealed counts as absent (check() false, wait() goes on
    waiting). Keys for which `is_counter` is true pass through unsealed (add() moves them). A value found
    unsealed is reported once per key through `report`."""

    def __init__(self, store, token: str, scope: str, is_counter: Callable[[str], bool] = lambda key: False,
                 report: Optional[Callable[[UnsealedValue], None]] = None):
        if not token:
            raise ValueError("a sealed store needs the job's token")
        self.raw, self._token, self._scope = store, token, scope
        self._is_counter, self._report = is_counter, report
        self._reported: set = set()
        self._last: Dict[str, bytes] = {}  # key -> the last sealed value written or read here

    def _seal(self, key: str, value: Value) -> bytes:
        return seal(self._token, self._scope, key, value)

    def _unseal(self, key: str, raw: bytes) -> bytes:
        try:
            value = self._last[key] = unseal(self._token, self._scope, key, raw)
            return value
        except UnsealedValue as err:
            if key not in self._reported and self._report is not None:
                self._reported.add(key)
                self._report(err)
            raise

    def _unseal_or_last(self, key: str, raw: bytes) -> bytes:
        try:
            return self._unseal(key, raw)
        except UnsealedValue:
            if key in self._last:
                return self._last[key]
            raise

    def set(self, key: str, value: Value) -> None:
        if self._is_counter(key):
            return self.raw.set(key, value)
        self.raw.set(key, self._seal(key, value))
        self._last[key] = _bytes(value)

    def get(self, key: str) -> bytes:
        """The value under `key`; UnsealedValue when a stranger's is there and this process saw no sealed one."""
        raw = self.raw.get(key)
        return raw if self._is_counter(key) else self._unseal_or_last(key, raw)

    def compare_set(self, key: str, expected: Value, desired: Value) -> bytes:
        """Like Store.compare_set, on the values before sealing (expected "" or b"": the key is absent). An
        unsealed value in the way is replaced: a stranger's write never blocks the job's own."""
        if self._is_counter(key):
            return self.raw.compare_set(key, expected, desired)
        sealed_desired = self._seal(key, desired)
        current = self.raw.compare_set(key, self._seal(key, expected) if _bytes(expected) else b"", sealed_desired)
        try:
            return self._unseal(key, current)
        except UnsealedValue:
            return self._unseal(key, self.raw.compare_set(key, current, sealed_desired))

    def check(self, keys: List[str]) -> bool:
        if not self.raw.check(keys):
            return False
        return all(self._is_counter(key) or self._holds_sealed(key) for key in keys)

    def _holds_sealed(self, key: str) -> bool:
        try:
            self._unseal_or_last(key, self.raw.get(key))
            return True
        except UnsealedValue:
            return False

    def wait(self, keys: List[str], timeout: timedelta) -> None:
        """Until every key holds a sealed value (or a counter exists); a timeout raises as Store.wait does."""
        deadline = time.monotonic() + timeout.total_seconds()
        self.raw.wait(keys, timeout)
        while not self.check(keys):
            left = deadline - time.monotonic()
            if left <= 0:
                unsealed = [key for key in keys if not self._is_counter(key) and not self._holds_sealed(key)]
                raise TimeoutError(f"waited {timeout.total_seconds():g} s for sealed values under {unsealed}")
            time.sleep(min(WAIT_POLL_S, left))

    def add(self, key: str, amount: int) -> int:
        return self.raw.add(key, amount)

    def delete_key(self, key: str) -> bool:
        return self.raw.delete_key(key)

