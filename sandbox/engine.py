"""A local Docker engine for the Docker backend, the image builds and their tests: started only when none
answers, and then in the narrowest setup that serves them.

The engine started here has no bridge network (``--bridge=none``: containers run with ``--network none`` or
the host's network, never on a bridge address) and leaves the host's firewall and forwarding alone
(``--iptables=false --ip-forward=false``). Its storage driver is the first of :data:`DRIVERS` the kernel
allows: overlay2 (copy-on-write in the kernel: a container starts in ~0.5 s), fuse-overlayfs (the same in user
space, where overlayfs is not allowed), vfs (a full copy of the image per container: seconds each, always works).

    python -m sandbox.engine start     # start one unless an engine answers; prints how to stop it
    python -m sandbox.engine stop      # stop the one started by `start` (never an engine started otherwise)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DRIVERS = ("overlay2", "fuse-overlayfs", "vfs")
FLAGS = ("--bridge=none", "--iptables=false", "--ip-forward=false")
LOG = Path("/var/tmp/genselect-dockerd.log")
PIDFILE = Path("/var/tmp/genselect-dockerd.pid")


class EngineUnavailable(RuntimeError):
    """No engine answers and none can be started here; the message says why."""


@dataclass
class Engine:
    """An engine that answers: ``proc`` is set when this process started it (and must stop it)."""

    driver: str
    proc: subprocess.Popen | None = None


def answers(timeout: float = 5.0) -> bool:
    """Whether a Docker engine answers at the environment's address (``DOCKER_HOST``, else the local socket)."""
    try:
        import docker

        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def driver_in_use() -> str:
    """The storage driver of the engine that answers ("" when none does)."""
    done = subprocess.run(["docker", "info", "--format", "{{.Driver}}"], capture_output=True, text=True, timeout=30)
    return done.stdout.strip() if done.returncode == 0 else ""


def why_not_startable() -> str | None:
    """Why this process cannot start an engine, or None when it can."""
    if os.environ.get("DOCKER_HOST"):
        return f"DOCKER_HOST={os.environ['DOCKER_HOST']} names an engine that does not answer"
    if not shutil.which("dockerd"):
        return "dockerd is not installed (as root on Debian/Ubuntu: sh sandbox/install.sh --docker)"
    if os.geteuid() != 0:
        return "dockerd is installed but this user is not root (start it as root, or join the docker group)"
    return None


def _try_driver(driver: str, wait_s: float) -> subprocess.Popen | None:
    """Start dockerd with ``driver``; the process once it answers, None (stopped again) if it never does."""
    if driver == "fuse-overlayfs" and not shutil.which("fuse-overlayfs"):
        return None
    with open(LOG, "ab") as log:
        log.write(f"--- dockerd --storage-driver={driver} {' '.join(FLAGS)}\n".encode())
        log.flush()
        proc = subprocess.Popen(["dockerd", f"--storage-driver={driver}", *FLAGS], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and proc.poll() is None:
        if answers(timeout=2):
            return proc
        time.sleep(0.5)
    _stop(proc)
    return None


def start(drivers: tuple[str, ...] = DRIVERS, wait_s: float = 60.0) -> Engine:
    """The engine that answers, or one started with the first storage driver that works; raises
    :class:`EngineUnavailable` (with the reason) when neither is possible."""
    if answers():
        return Engine(driver_in_use())
    reason = why_not_startable()
    if reason:
        raise EngineUnavailable(f"no Docker engine answers and none can be started: {reason}")
    for driver in drivers:
        proc = _try_driver(driver, wait_s)
        if proc is not None:
            return Engine(driver, proc)
    raise EngineUnavailable(f"dockerd started with none of the storage drivers {', '.join(drivers)} "
                            f"(see {LOG})")


def _stop(proc: subprocess.Popen, wait_s: float = 60.0) -> None:
    """SIGTERM (dockerd then stops its containers and its containerd), SIGKILL after ``wait_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def stop(engine: Engine) -> None:
    """Stop the engine if this process started it; an engine that was already there is left alone."""
    if engine.proc is not None:
        _stop(engine.proc)


def _is_dockerd(pid: int) -> bool:
    """Whether ``pid`` is a live dockerd (not a recycled pid, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return "(dockerd)" in stat and stat.split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def _cli(argv: list[str]) -> int:
    if argv == ["start"]:
        try:
            engine = start()
        except EngineUnavailable as exc:
            print(exc, file=sys.stderr)
            return 1
        if engine.proc is None:
            print(f"a Docker engine already answers (storage driver {engine.driver}); nothing started")
        else:
            PIDFILE.write_text(str(engine.proc.pid))
            print(f"started dockerd (pid {engine.proc.pid}, storage driver {engine.driver}, log {LOG}); "
                  "stop it with: python -m sandbox.engine stop")
        return 0
    if argv == ["stop"]:
        if not PIDFILE.exists():
            print("no engine was started by `python -m sandbox.engine start`; nothing stopped")
            return 0
        pid = int(PIDFILE.read_text())
        PIDFILE.unlink()
        if not _is_dockerd(pid):
            print(f"dockerd (pid {pid}) had already ended; nothing stopped")
            return 0
        os.kill(pid, signal.SIGTERM)
        for _ in range(120):  # dockerd stops its containers first
            if not _is_dockerd(pid):
                break
            time.sleep(0.5)
        print(f"stopped dockerd (pid {pid})")
        return 0
    print(__doc__.split("\n\n")[-1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
