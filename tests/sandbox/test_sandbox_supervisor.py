"""Killing the supervisor mid-run: the sandboxed processes die, and the janitor removes the cgroups and
containers that the killed supervisor could not remove itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.sandbox.helpers_sandbox import mounts, processes_with

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

SUPERVISOR = """
import json, sys
from sandbox.config import CodeTask, SandboxConfig
from sandbox.pool import SandboxPool
backend, token = sys.argv[1], sys.argv[2] + "-run"  # the suffix keeps this process's own argv from matching
pool = SandboxPool(SandboxConfig(backend=backend, timeout_s=60, case_timeout_s=None, workers=1))
b = pool.backend
info = {"cgroups": [str(p) for p in b.cgroups.pool_dirs.values()] if getattr(b, "cgroups", None) else [],
        "label": getattr(b, "label", None)}
print(json.dumps(info), flush=True)
body = ("    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120) # %s'], start_new_session=True)\\n"
        "    time.sleep(120)\\n" % token)
pool.run(CodeTask("import subprocess, sys, time\\ndef f():\\n" + body, "def check(c):\\n    assert c()\\n",
                  entry_point="f"))
"""


def _wait_for(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _containers(label: str) -> list[str]:
    import docker

    from sandbox.backends.docker import LABEL

    client = docker.from_env()
    try:
        return [c["Id"] for c in client.api.containers(all=True, filters={"label": f"{LABEL}={label}"})]
    finally:
        client.close()


@pytest.mark.parametrize("backend", ["bubblewrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_sigkill_of_the_supervisor_leaves_nothing_behind(backend, request):
    if backend == "docker":
        request.getfixturevalue("docker_engine")
    prefix = uuid.uuid4().hex
    token = prefix + "-run"
    before = mounts()
    child = subprocess.Popen([sys.executable, "-c", SUPERVISOR, backend, prefix], cwd=REPO, stdout=subprocess.PIPE,
                             text=True)
    try:
        info = json.loads(child.stdout.readline())
        assert _wait_for(lambda: processes_with(token), 30), "the sandboxed run never started"
        if backend == "bubblewrap" and info["cgroups"]:
            assert any(p.is_dir() for c in info["cgroups"] for p in Path(c).iterdir())  # a run cgroup is live
        if backend == "docker":
            assert _containers(info["label"]), "no container is running"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert _wait_for(lambda: not processes_with(token), 15), processes_with(token)
    assert _wait_for(lambda: not any(Path(c).exists() for c in info["cgroups"]), 15), info["cgroups"]
    if backend == "docker":
        assert _wait_for(lambda: not _containers(info["label"]), 30)
    assert _wait_for(lambda: not (mounts() - before), 15), mounts() - before
