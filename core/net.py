"""Network helpers shared by the layers above (pure: standard library only)."""
from __future__ import annotations


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now ("" = every interface, for peers on other nodes)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
