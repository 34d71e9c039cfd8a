"""TLS for the job's HTTP and wire endpoints, switched on by configuration: mutual authentication with the
job's certificate (TLS 1.3 only; the reference's TLS is a certificate per job as well).

MINDIO_TLS_CERT and MINDIO_TLS_KEY name this process's certificate chain and private key (PEM), and
MINDIO_TLS_CA the certificate authority that signed every certificate of the job: each side presents its
certificate and accepts only a peer whose certificate that authority signed. All three or none: a partial
configuration is an error naming what is missing, never a silent fall back to plain TCP. Without them the
endpoints stay plain TCP with the job's token, for trusted networks (docs/security.md).
"""
from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from typing import Mapping, Optional

logger = logging.getLogger(__name__)

ENV_CERT, ENV_KEY, ENV_CA = "MINDIO_TLS_CERT", "MINDIO_TLS_KEY", "MINDIO_TLS_CA"
_NAMES = (ENV_CERT, ENV_KEY, ENV_CA)


class TlsConfigError(ValueError):
    """The message names the variable and the problem."""


@dataclass(frozen=True)
class TlsConfig:
    cert: str
    key: str
    ca: str

    @staticmethod
    def from_env(environ: Mapping[str, str] = os.environ) -> Optional["TlsConfig"]:
        """The configuration the environment gives, None when it gives none; TlsConfigError when it is partial
        or names a file that cannot be read."""
        given = {name: environ.get(name, "").strip() for name in _NAMES}
        if not any(given.values()):
            return None
        missing = [name for name, value in given.items() if not value]
        if missing:
            raise TlsConfigError(f"TLS needs {', '.join(_NAMES)} together; {', '.join(missing)} "
                                 f"{'is' if len(missing) == 1 else 'are'} not set (unset all three for plain TCP)")
        for name, path in given.items():
            if not os.access(path, os.R_OK):
                raise TlsConfigError(f"{name}={path}: the file cannot be read")
        config = TlsConfig(given[ENV_CERT], given[ENV_KEY], given[ENV_CA])
        config.server_context()  # a certificate that does not match its key is said at start-up
        return config

    def _context(self, purpose: ssl.Purpose) -> ssl.SSLContext:
        context = ssl.create_default_context(purpose, cafile=self.ca)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as err:
            raise TlsConfigError(f"{ENV_CERT}={self.cert}, {ENV_KEY}={self.key}: cannot be used together "
                                 f"({getattr(err, 'reason', None) or err})") from None
        return context

    def server_context(self) -> ssl.SSLContext:
        """For a listening side: it presents the job's certificate and requires the peer's."""
        return self._context(ssl.Purpose.CLIENT_AUTH)

    def client_context(self) -> ssl.SSLContext:
        """For a connecting side. The peer is checked against the job's authority, not a host name: the job's
        certificate is one for every process, wherever it runs."""
        context = self._context(ssl.Purpose.SERVER_AUTH)
        context.check_hostname = False
        return context


def tls_link(side: str, enable_tls: bool, tls_info: str) -> Optional[TlsConfig]:
    """What the reference API's enable_tls/tls_info come to for the controller's link (the native code reads
    the same variables): the configuration, or None for plain TCP, said once when TLS was asked for."""
    if tls_info:
        raise ValueError(f"tls_info={tls_info!r}: the {side}'s certificates come from {ENV_CERT}, {ENV_KEY} and "
                         f"{ENV_CA} (tls_info is not read)")
    config = TlsConfig.from_env()
    if config is None and enable_tls:
        logger.warning("the %s's link is plain TCP authenticated by MINDIO_TOKEN: set %s, %s and %s for TLS "
                       "(or pass enable_tls=False to silence this)", side, ENV_CERT, ENV_KEY, ENV_CA)
    return config
