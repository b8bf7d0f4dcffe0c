"""Who may reach a cluster: TLS settings from a directory of certificates, the security a
:func:`ppt_dask.engine.placement.cluster.connect` is given checked against its address, and
the credentials of the LocalCluster it starts (made for that cluster alone)."""

from __future__ import annotations

import os
from pathlib import Path

import dask
from distributed import Security

# the files of a TLS directory made by deploy/make_certs.py
CERT_FILES = {
    "ca": "ca.pem",
    "scheduler": ("scheduler.pem", "scheduler-key.pem"),
    "worker": ("worker.pem", "worker-key.pem"),
    "client": ("client.pem", "client-key.pem"),
}
TLS_SCHEMES = ("tls", "wss")


def tls_security(certs_dir) -> Security:
    """TLS settings from a directory made by ``deploy/make_certs.py``; encryption required.

    The CA and the client certificate must be there. The scheduler and worker certificates
    are used when present (a LocalCluster started with these settings needs them).
    """
    base = Path(certs_dir).expanduser().resolve()
    if not base.is_dir():
        raise FileNotFoundError(f"TLS directory {str(base)!r} not found: make it with deploy/make_certs.py")
    ca = base / CERT_FILES["ca"]
    missing = [str(p) for p in (ca, *(base / n for n in CERT_FILES["client"])) if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"TLS directory {str(base)!r} lacks {', '.join(missing)} "
                                "(deploy/make_certs.py makes them)")
    kwargs = {"tls_ca_file": str(ca)}
    for role in ("client", "scheduler", "worker"):
        cert, key = (base / n for n in CERT_FILES[role])
        if cert.is_file() and key.is_file():
            kwargs[f"tls_{role}_cert"], kwargs[f"tls_{role}_key"] = str(cert), str(key)
    return Security(require_encryption=True, **kwargs)


def resolve_security(security, address: str | None = None):
    """``security`` as given to :func:`connect`, checked against the address's scheme."""
    if isinstance(security, (str, os.PathLike)):
        security = tls_security(security)
    elif security is not None and not isinstance(security, (bool, Security)):
        raise TypeError("security must be a distributed.Security, a TLS directory made by "
                        f"deploy/make_certs.py, or None (the dask configuration); got {type(security).__name__}")
    if address is None:
        return security
    scheme = address.split("://", 1)[0]
    if scheme in TLS_SCHEMES:
        if security is None and dask.config.get("distributed.client.security-loader", None):
            return security
        effective = security if isinstance(security, Security) else Security()
        if not (effective.tls_ca_file and effective.tls_client_cert):
            raise ValueError(
                f"{address!r} uses TLS but no client certificate is set: pass security=CERTS_DIR "
                "(made by deploy/make_certs.py) or a distributed.Security, or set "
                "distributed.comm.tls.ca-file and distributed.comm.tls.client.cert/.key in the dask "
                "configuration")
    elif isinstance(security, Security) and security.require_encryption and scheme not in ("inproc",):
        raise ValueError(f"{address!r} is not encrypted but the TLS settings require encryption: "
                         f"use tls://{address.split('://', 1)[1]}")
    return security


def local_security(security, processes: bool, cluster_kwargs: dict):
    """The security of the LocalCluster that :func:`connect` starts.

    By default (``security=None``) a cluster of worker processes listens on tcp ports of
    127.0.0.1 that every local user can reach, and a Dask scheduler runs the code any client
    sends it: so it uses TLS with credentials made for it alone (``Security.temporary()``: a
    self-signed certificate and key made now, held in this process's memory and handed to
    the workers it spawns, never written to a file), encryption required; a client without
    them is refused. Not where the dask configuration sets TLS files (``distributed.comm.tls``:
    the user's own), nor for a threads cluster (``processes=False``: in-process, nothing
    listens) or one given a ``protocol``. ``security=False``: plain tcp, open to every local
    process (for a cluster that other processes of the machine must reach by its address).
    ``True``: temporary credentials as for the default, whatever the layout."""
    if security is False:
        return None
    if security is None:
        if not processes or "protocol" in cluster_kwargs or Security().tls_ca_file:
            return None
        security = True
    if security is True:
        try:
            return Security.temporary()
        except ImportError as exc:  # cryptography makes the certificate (a dependency of ppt_dask)
            raise ImportError("ppt.connect() makes TLS credentials for the cluster it starts and needs the "
                              "cryptography package for it: pip install cryptography (or security=False: "
                              "a cluster open to every local process)") from exc
    return security
