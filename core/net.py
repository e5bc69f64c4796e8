"""Network helpers shared by the layers above (pure: standard library only)."""
from __future__ import annotations

import random

# Ray's defaults claim 6379 (GCS), 8265 (dashboard), 10001 (client) and 10002-19999 (worker ports); the
# kernel hands out its ephemeral range (Linux: 32768-60999) to every outgoing connection.
RENDEZVOUS_LOW = 20000
EPHEMERAL_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now ("" = every interface, for peers on other nodes).

    The kernel picks it from its ephemeral range, so an outgoing connection may take it before a listener
    binds it: for a port that other processes must be told in advance, use `rendezvous_port`."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ephemeral_range(path: str = EPHEMERAL_FILE) -> tuple[int, int]:
    """(low, high) of the kernel's ephemeral ports; Linux's default where the file cannot be read."""
    from pathlib import Path

    try:
        low, high = (int(x) for x in Path(path).read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def rendezvous_port(host: str = "", attempts: int = 200, path: str = EPHEMERAL_FILE,
                    rng: random.Random | None = None) -> int:
    """A port free on `host` now, outside the kernel's ephemeral range and Ray's default ports.

    For a port chosen by one process and listened on later by another (a process group's store: the learner
    ranks' rendezvous, the NCCL weight-update group). A port from `free_port` lies in the ephemeral range,
    where any outgoing connection on the node can take it in between (CI once failed with EADDRINUSE on a
    2-rank learner's rendezvous); no connection is given a port outside that range, so only another listener
    could take this one. Random among [RENDEZVOUS_LOW, ephemeral low) (above the range if that is empty),
    checked by binding; `free_port` if none of `attempts` picks is free."""
    import socket

    low, high = ephemeral_range(path)
    span = (RENDEZVOUS_LOW, low - 1) if low - 1 - RENDEZVOUS_LOW >= 1000 else (high + 1, 65535)
    rng = rng or random.Random()
    for _ in range(attempts if span[1] > span[0] else 0):
        port = rng.randint(*span)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    return free_port(host)
