"""Network helpers shared by the layers above (pure: standard library only)."""
from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range() -> tuple:
    """(low, high): the ports the kernel hands out for port 0 and for the local end of outgoing connections
    (Linux: /proc/sys/net/ipv4/ip_local_port_range; its usual 32768-60999 elsewhere)."""
    try:
        low, high = (int(x) for x in _RANGE_FILE.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now ("" = every interface, for peers on other nodes), chosen outside the
    ephemeral range: a port from inside it (what binding port 0 gives) can be taken by any outgoing connection
    before its listener binds it, which CI saw as EADDRINUSE on a learner group's rendezvous port."""
    low, high = ephemeral_range()
    spans = [(p, q) for p, q in ((10000, low - 1), (high + 1, 65535)) if q - p >= 100]
    rng = random.SystemRandom()
    for _ in range(200 if spans else 0):
        port = rng.randint(*rng.choice(spans))
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # no room outside the ephemeral range (an unusual kernel setting)
        s.bind((host, 0))
        return s.getsockname()[1]
