#!/usr/bin/env python3
"""Make the TLS material of a ppt_dask cluster: a private CA and three certificates.

    python deploy/make_certs.py CERTS_DIR --hosts node1 node2 10.0.0.7

writes into CERTS_DIR (created with mode 0700):

    ca.pem                      the cluster's CA certificate (every host and every client)
    ca-key.pem                  the CA's private key: keep it off the cluster (0600)
    scheduler.pem, scheduler-key.pem   the scheduler's certificate and key (0600)
    worker.pem, worker-key.pem         the workers' (and nannies') certificate and key (0600)
    client.pem, client-key.pem         the client's certificate and key: stays with the user (0600)

Any certificate signed by this CA is let in by the scheduler and the workers, whatever its
role, and whoever holds one of these keys can run code on the cluster: keep the keys 0600,
the client key off the cluster hosts, and the CA key somewhere else altogether.

Keys are ECDSA P-256. The CA may only sign (key usage keyCertSign, cRLSign; path length 0).
The other certificates have key usage digitalSignature; the scheduler and worker ones are
for servers and clients (they listen and they connect out), the client one for a client
only. Every certificate names ``localhost``, ``127.0.0.1``, ``::1`` and the hosts given as
subject alternative names (Dask checks the
chain against the CA, not the host names, but other TLS tools may look at them).

Run again on the same directory: the CA is reused and existing certificates are kept, so
this adds what is missing (``--force`` makes new certificates with the same CA).

Needs the ``cryptography`` package (``pip install "ppt_dask[deploy]"``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import sys
from pathlib import Path

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError:  # pragma: no cover - depends on the environment
    sys.exit("make_certs.py needs the 'cryptography' package: pip install 'ppt_dask[deploy]'")

ROLES = {
    # role: (extended key usages, what it is for)
    "scheduler": ([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], "scheduler"),
    "worker": ([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], "workers and nannies"),
    "client": ([ExtendedKeyUsageOID.CLIENT_AUTH], "clients"),
}
DEFAULT_NAMES = ["localhost", "127.0.0.1", "::1"]


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write a new file with ``mode`` from the start (no window with wider permissions)."""
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)  # whatever the umask
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _key_bytes(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_bytes(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _san(names) -> x509.SubjectAlternativeName:
    entries, seen = [], set()
    for name in names:
        name = name.strip()
        if not name or name in seen:
            continue
        seen.add(name)
        host = name.split("@")[-1]  # user@host in a host file
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)  # tolerate small clock skew


def make_ca(common_name: str, days: int):
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now()).not_valid_after(_now() + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_leaf(role: str, ca_key, ca_cert, names, days: int):
    usages, _ = ROLES[role]
    key = _new_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"ppt-dask {role}")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now()).not_valid_after(_now() + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(_san(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def make_certs(directory, hosts=(), *, days: int = 825, ca_days: int = 3650,
               ca_name: str = "ppt-dask cluster CA", force: bool = False) -> dict:
    """Create (or complete) the TLS material in ``directory``; return ``{file: path}``."""
    out = Path(directory).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    names = DEFAULT_NAMES + list(hosts)
    ca_pem, ca_key_pem = out / "ca.pem", out / "ca-key.pem"
    if ca_pem.exists() and ca_key_pem.exists():
        ca_cert = x509.load_pem_x509_certificate(ca_pem.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_pem.read_bytes(), password=None)
    elif ca_pem.exists() or ca_key_pem.exists():
        raise SystemExit(f"{out} holds only one of ca.pem and ca-key.pem: move it away first")
    else:
        ca_key, ca_cert = make_ca(ca_name, ca_days)
        _write(ca_key_pem, _key_bytes(ca_key), 0o600)
        _write(ca_pem, _cert_bytes(ca_cert), 0o644)
    files = {"ca": ca_pem, "ca-key": ca_key_pem}
    for role in ROLES:
        cert_path, key_path = out / f"{role}.pem", out / f"{role}-key.pem"
        files[role], files[f"{role}-key"] = cert_path, key_path
        if cert_path.exists() and key_path.exists() and not force:
            continue
        key, cert = make_leaf(role, ca_key, ca_cert, names, days)
        _write(key_path, _key_bytes(key), 0o600)
        _write(cert_path, _cert_bytes(cert), 0o644)
    return files


def main(argv=None) -> int:
    doc = __doc__.split("\n\n")
    parser = argparse.ArgumentParser(prog="make_certs.py", description=doc[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(doc[1:4]))
    parser.add_argument("directory", help="where to write the files (created, mode 0700)")
    parser.add_argument("--hosts", nargs="*", default=[], metavar="HOST",
                        help="host names or addresses of the cluster machines (subject alternative names)")
    parser.add_argument("--hostfile", default=None, help="read more hosts from this file (one per line, # comments)")
    parser.add_argument("--days", type=int, default=825, help="validity of the certificates (default 825)")
    parser.add_argument("--ca-days", type=int, default=3650, help="validity of a new CA (default 3650)")
    parser.add_argument("--force", action="store_true", help="replace existing certificates (the CA is kept)")
    args = parser.parse_args(argv)
    hosts = list(args.hosts)
    if args.hostfile:
        for line in Path(args.hostfile).read_text().splitlines():
            line = line.split("#", 1)[0].split()
            if line:
                hosts.append(line[0])
    if args.days < 1 or args.ca_days < 1:
        parser.error("--days and --ca-days must be >= 1")
    files = make_certs(args.directory, hosts, days=args.days, ca_days=args.ca_days, force=args.force)
    for path in files.values():
        print(f"{oct(path.stat().st_mode & 0o777)[2:]}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
