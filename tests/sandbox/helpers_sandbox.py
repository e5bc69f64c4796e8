"""Helpers of the sandbox tests: pool construction with the attack limits, and probes for anything a run could
leave behind (run cgroups, containers, processes, mounts)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sandbox.backends.base import SandboxUnavailable
from sandbox.config import SandboxConfig
from sandbox.pool import SandboxPool

SECRET_DIR = Path("/var/tmp/genselect-sandbox-test")  # holds a root-only file; bound read-only into sandboxes


def attack_config(backend: str, **overrides) -> SandboxConfig:
    """Tight limits so that attacks end fast."""
    base = dict(backend=backend, timeout_s=2.5, case_timeout_s=None, memory_mb=256, max_processes=32,
                max_output_bytes=1 << 20, workers=2, extra_ro_binds=(str(SECRET_DIR),))
    base.update(overrides)
    return SandboxConfig(**base)


def make_pool(backend: str, request, **overrides) -> SandboxPool:
    """A started pool for ``backend`` (attack limits unless overridden); Docker skips without an engine."""
    if backend == "docker":
        request.getfixturevalue("docker_engine")
    request.getfixturevalue("secret_dir")
    try:
        return SandboxPool(attack_config(backend, **overrides))
    except SandboxUnavailable as exc:
        if backend == "docker":
            pytest.skip(str(exc))
        raise


def _prestarted(pool: SandboxPool) -> list:
    """Sandboxes the pool booted ahead of time (``prestart``): legitimately alive between runs."""
    with pool.backend._lock:
        return list(pool.backend._prestarted)


def run_dirs(pool: SandboxPool) -> list[Path]:
    """Per-run cgroup dirs that exist and belong to no prestarted sandbox (none may survive its run)."""
    cg = getattr(pool.backend, "cgroups", None)
    if cg is None:
        return []
    found = [d for base in cg.pool_dirs.values() for d in base.iterdir() if d.is_dir()]
    live = {d for launch in _prestarted(pool) if launch.cg is not None for d in launch.cg.dirs.values()}
    return [d for d in found if d not in live]


def labelled_containers(pool: SandboxPool) -> list[str]:
    """Containers of this pool that exist and are not prestarted (none may survive its run)."""
    backend = pool.backend
    if backend.name != "docker":
        return []
    from sandbox.backends.docker import LABEL

    found = [c["Id"] for c in backend.api.containers(all=True, filters={"label": f"{LABEL}={backend.label}"})]
    live = {launch.cid for launch in _prestarted(pool)}
    return [c for c in found if c not in live]


def _prestarted_mount_markers(pool: SandboxPool) -> list[str]:
    """Paths that identify the host mounts of prestarted containers (overlay root, network namespace)."""
    if pool.backend.name != "docker":
        return []
    markers = []
    for launch in _prestarted(pool):
        info = pool.backend.api.inspect_container(launch.cid)
        network = info.get("NetworkSettings") or {}  # None for a container created with networking disabled
        markers += [(info.get("GraphDriver") or {}).get("Data", {}).get("MergedDir") or launch.cid, launch.cid,
                    network.get("SandboxKey") or launch.cid]
    return markers


def processes_with(token: str) -> list[int]:
    """Pids of live processes whose command line contains ``token``."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me:
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def mounts() -> set[str]:
    """The host's mount table (this namespace)."""
    return set(Path("/proc/self/mounts").read_text().splitlines())


def new_mounts(pool: SandboxPool, before: set[str]) -> set[str]:
    """Mounts added since ``before`` that belong to no prestarted sandbox."""
    markers = _prestarted_mount_markers(pool)
    return {m for m in mounts() - before if not any(marker in m for marker in markers)}


def _settled(check, timeout: float = 5.0):
    """Poll ``check`` (returns a list/set of leftovers) until it is empty or the timeout passes; the last value.
    Killed processes take a moment to be reaped, and a worker may be booting its next sandbox meanwhile."""
    end = time.monotonic() + timeout
    while True:
        left = check()
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


def assert_nothing_left(pool: SandboxPool, token: str | None = None, mounts_before: set[str] | None = None) -> None:
    """No run cgroup, container, token-bearing process or new mount survives a finished run."""
    assert _settled(lambda: run_dirs(pool)) == []
    assert _settled(lambda: labelled_containers(pool)) == []
    if token:
        assert _settled(lambda: processes_with(token)) == []
    if mounts_before is not None:
        assert _settled(lambda: new_mounts(pool, mounts_before)) == set()
