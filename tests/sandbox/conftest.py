"""Fixtures of the sandbox tests: one pool per backend for the whole session, a Docker engine (started here if
none runs and this process may start one; stopped again at the end), and a directory with a root-only file."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sandbox.config import SandboxConfig

from tests.sandbox.helpers_sandbox import SECRET_DIR, make_pool

REPO = Path(__file__).resolve().parents[2]
BUILD_IMAGE = REPO / "sandbox" / "docker" / "build_image.sh"


def _engine_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@pytest.fixture(scope="session")
def docker_engine():
    """A reachable Docker engine with the sandbox image, or a skip that says why not."""
    started = None
    if not _engine_answers():
        if not shutil.which("dockerd") or os.geteuid() != 0:
            pytest.skip("no Docker engine answers and dockerd cannot be started here (not installed or not root)")
        log = open("/var/tmp/genselect-sandbox-dockerd.log", "ab")
        started = subprocess.Popen(["dockerd"], stdout=log, stderr=log, start_new_session=True)
        for _ in range(60):
            if _engine_answers() or started.poll() is not None:
                break
            time.sleep(0.5)
        if not _engine_answers():
            started.terminate()
            started.wait(30)
            pytest.skip("dockerd was started but no engine answers (see /var/tmp/genselect-sandbox-dockerd.log)")
    image = SandboxConfig.docker_image
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        built = subprocess.run(["sh", str(BUILD_IMAGE), image], capture_output=True, text=True, timeout=600)
        if built.returncode != 0:
            pytest.skip(f"sandbox image {image} missing and could not be built: {built.stderr[-500:]}")
    yield image
    if started is not None:
        started.terminate()
        started.wait(60)
        log.close()
        os.unlink(log.name)


@pytest.fixture(scope="session")
def secret_dir():
    """A directory, bound read-only into the sandboxes, with a root-only file and a world-readable one."""
    SECRET_DIR.mkdir(mode=0o755, exist_ok=True)
    os.chmod(SECRET_DIR, 0o755)
    (SECRET_DIR / "secret.txt").write_text("root-only secret\n")
    os.chmod(SECRET_DIR / "secret.txt", 0o600)
    (SECRET_DIR / "public.txt").write_text("public\n")
    os.chmod(SECRET_DIR / "public.txt", 0o644)
    yield SECRET_DIR
    shutil.rmtree(SECRET_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def bwrap_pool(request):
    pool = make_pool("bubblewrap", request)
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def docker_pool(request):
    pool = make_pool("docker", request)
    yield pool
    pool.close()


@pytest.fixture(params=["bubblewrap", pytest.param("docker", marks=pytest.mark.docker)])
def pool(request):
    """The attack pool of each backend (Docker tests skip, with the reason, without an engine)."""
    return request.getfixturevalue("bwrap_pool" if request.param == "bubblewrap" else "docker_pool")
