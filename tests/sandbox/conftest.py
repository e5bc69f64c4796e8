"""Fixtures of the sandbox tests: one pool per backend for the whole session, a Docker engine (started here if
none runs and this process may start one; stopped again at the end), and a directory with a root-only file."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox import engine as sandbox_engine
from sandbox.config import SandboxConfig

from tests.sandbox.helpers_sandbox import SECRET_DIR, make_pool

REPO = Path(__file__).resolve().parents[2]
BUILD_IMAGE = REPO / "sandbox" / "docker" / "build_image.sh"


@pytest.fixture(scope="session")
def docker_engine():
    """A reachable Docker engine with the sandbox image of the current recipe (built when missing or stale), or a
    skip that says why not. An engine is started (sandbox.engine: no bridge, fastest storage driver the kernel
    allows) only when none answers, and stopped again at the end of the session."""
    try:
        engine = sandbox_engine.start()
    except sandbox_engine.EngineUnavailable as exc:
        pytest.skip(str(exc))
    try:
        image = SandboxConfig.docker_image
        built = subprocess.run(["sh", str(BUILD_IMAGE), image], capture_output=True, text=True, timeout=900)
        if built.returncode != 0 and not shutil.which("debootstrap"):
            pytest.skip(f"sandbox image {image} is missing or stale and debootstrap, which builds it, is not "
                        "installed (as root: sh sandbox/install.sh --docker)")
        if built.returncode != 0:
            pytest.fail(f"sandbox image {image} could not be built: {built.stdout[-500:]}{built.stderr[-1500:]}")
        yield image
    finally:
        sandbox_engine.stop(engine)


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
