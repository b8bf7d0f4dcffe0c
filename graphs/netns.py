"""Network namespaces and rate-limited links: the commands both graphs/validate_links.py and
the test hosts (tests/hosts.py) build their machines with. Needs root and iproute2 (ip, tc).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid


def sh(*args, check=True, ns=None) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=check)


def why_not() -> str | None:
    """None when namespaces and rate limits can be made here, else the reason."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and tc qdiscs need CAP_NET_ADMIN)"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "needs the ip and tc commands (iproute2)"
    name = f"pptl-probe-{uuid.uuid4().hex[:6]}"
    try:
        made = sh("ip", "netns", "add", name, check=False)
        if made.returncode:
            return f"cannot make a network namespace: {made.stderr.strip()}"
        sh("ip", "link", "add", "pptlp0", "type", "veth", "peer", "name", "pptlp1", check=False)
        tbf = sh("tc", "qdisc", "add", "dev", "pptlp0", "root", "tbf", "rate", "100mbit", "burst", "32kb",
                 "latency", "50ms", check=False)
        if tbf.returncode:
            return f"the kernel cannot rate-limit a link (tc tbf: {tbf.stderr.strip()})"
        return None
    finally:
        sh("ip", "link", "del", "pptlp0", check=False)
        sh("ip", "netns", "del", name, check=False)


def has_netem() -> bool:
    sh("ip", "link", "add", "pptlq0", "type", "veth", "peer", "name", "pptlq1", check=False)
    try:
        return sh("tc", "qdisc", "add", "dev", "pptlq0", "root", "netem", "delay", "1ms", check=False).returncode == 0
    finally:
        sh("ip", "link", "del", "pptlq0", check=False)


def _rate_bytes(rate: str) -> float:
    units = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale
    raise ValueError(f"a rate like 100mbit or 1gbit, got {rate!r}")


def qdisc(rate: str, delay: str = "0ms", netem: bool = False) -> list[str]:
    """The qdisc of one end of a link: netem rate+delay, or tbf rate (1 ms of burst)."""
    if netem:
        return ["netem", "rate", rate, "delay", delay, "limit", "10000"]
    burst = max(int(_rate_bytes(rate) / 1000), 16 * 1024)
    return ["tbf", "rate", rate, "burst", str(burst), "latency", "100ms"]
