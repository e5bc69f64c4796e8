"""Janitor: cleans up after a supervisor that was killed mid-run (SIGKILL leaves no chance to clean up itself).

The pool starts one janitor per backend in a new session, with a pipe as its stdin. The janitor blocks on
that pipe; when it reads end-of-file (the supervisor exited or closed it) it kills every process left in the
pool's cgroups, removes them, and force-removes every Docker container labelled with the pool's id. After a
normal ``close()`` there is nothing left and it exits at once. Processes of a bubblewrap sandbox die with their
supervisor anyway (``--die-with-parent`` and the pid namespace); the janitor removes what the kernel keeps:
cgroup directories and containers.

Run as ``python -m sandbox.janitor [--cgroup DIR]... [--docker-label KEY=VALUE [--docker-url URL]]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from sandbox.cgroups import kill_and_remove


def remove_containers(label: str, base_url: str | None) -> int:
    """Force-remove every container (running or not) that carries ``label``; returns how many."""
    import docker  # only needed for the Docker backend

    client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
    try:
        ids = [c["Id"] for c in client.api.containers(all=True, filters={"label": label})]
        for cid in ids:
            try:
                client.api.remove_container(cid, force=True)
            except docker.errors.NotFound:
                pass
        return len(ids)
    finally:
        client.close()


def cleanup(cgroups: list[str], docker_label: str | None, docker_url: str | None) -> None:
    """Everything the janitor does at end-of-file."""
    if cgroups:
        kill_and_remove([Path(c) for c in cgroups])
    if docker_label:
        try:
            remove_containers(docker_label, docker_url)
        except Exception as exc:  # the engine may be gone too; nothing else to do
            print(f"janitor: could not remove containers labelled {docker_label}: {exc}", file=sys.stderr)


def start(cgroups: list[Path], docker_label: str | None = None, docker_url: str | None = None) -> subprocess.Popen:
    """Start a janitor for these resources; close its ``stdin`` (or die) to make it clean up."""
    argv = [sys.executable, "-m", "sandbox.janitor"]
    for c in cgroups:
        argv += ["--cgroup", str(c)]
    if docker_label:
        argv += ["--docker-label", docker_label]
        if docker_url:
            argv += ["--docker-url", docker_url]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
                            start_new_session=True, close_fds=True)


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Ask a janitor to run its cleanup now (close its pipe) and wait for it."""
    try:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cgroup", action="append", default=[])
    parser.add_argument("--docker-label")
    parser.add_argument("--docker-url")
    args = parser.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: (cleanup(args.cgroup, args.docker_label, args.docker_url), os._exit(0)))
    while sys.stdin.buffer.read(4096):
        pass
    cleanup(args.cgroup, args.docker_label, args.docker_url)


if __name__ == "__main__":
    main()
