"""Start-up checks (clear refusal, never a silent fallback), the CLI, the pool's API, cgroup sweeping, purity."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sandbox.backends.bubblewrap as bw
from sandbox.cgroups import CgroupPool, _pidns
from sandbox.config import CodeTask, SandboxConfig
from sandbox.pool import SandboxPool, SandboxUnavailable

REPO = Path(__file__).resolve().parents[2]
GOOD = CodeTask(solution="def f(x):\n    return x + 1\n", tests="def check(c):\n    assert c(1) == 2\n",
                entry_point="f")


def test_missing_bwrap_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(bw.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        SandboxPool(SandboxConfig(backend="bubblewrap"))


def test_required_cgroups_are_refused_when_unavailable(monkeypatch):
    monkeypatch.setattr(bw.CgroupPool, "create", classmethod(lambda cls: (None, "no cgroups for this test")))
    with pytest.raises(SandboxUnavailable, match="no cgroups for this test"):
        SandboxPool(SandboxConfig(use_cgroups="require"))


def test_cgroups_auto_degrades_to_rlimits_and_says_so(monkeypatch):
    monkeypatch.setattr(bw.CgroupPool, "create", classmethod(lambda cls: (None, "no cgroups for this test")))
    with SandboxPool(SandboxConfig(use_cgroups="auto", workers=1)) as pool:
        assert "rlimits only" in pool.describe()["cgroups"]
        r = pool.run(GOOD)
    assert r.all_passed and r.cgroup_limits is False


def test_unreachable_docker_is_refused_not_replaced():
    pytest.importorskip("docker")
    with pytest.raises(SandboxUnavailable, match="no Docker engine answers"):
        SandboxPool(SandboxConfig(backend="docker", docker_base_url="unix:///nonexistent/docker.sock"))


@pytest.mark.docker
def test_missing_docker_image_is_refused_with_the_recipe(docker_engine):
    with pytest.raises(SandboxUnavailable, match="build_image.sh"):
        SandboxPool(SandboxConfig(backend="docker", docker_image="genselect-sandbox:does-not-exist"))


def test_unsafe_backend_must_be_named_and_warns():
    with pytest.warns(RuntimeWarning, match="NO isolation"):
        with SandboxPool(SandboxConfig(backend="unsafe_subprocess", workers=1)) as pool:
            assert pool.run(GOOD).all_passed


@pytest.mark.slow
def test_pool_is_thread_safe_and_keeps_order(bwrap_pool):
    tasks = [CodeTask(solution=f"def f(x):\n    return x + {i}\n", tests="def check(c):\n    assert c(1) == 2\n",
                      entry_point="f") for i in range(6)]
    out: dict[int, list] = {}
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, bwrap_pool.run_many(tasks))) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for results in out.values():
        assert [r.all_passed for r in results] == [i == 1 for i in range(6)]


def test_closed_pool_refuses_work():
    pool = SandboxPool(SandboxConfig(workers=1))
    pool.close()
    pool.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(GOOD)


def test_stale_pool_cgroups_of_dead_supervisors_are_swept():
    probe, reason = CgroupPool.create()
    if probe is None:
        pytest.skip(f"no writable cgroups here: {reason}")
    base = probe.pool_dirs["pids"].parent
    probe.close()
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is dead (and, on a busy host, very unlikely to be reused within this test)
    stale = base / f"gsbx-{_pidns()}-{dead.pid}-00000000"
    stale.mkdir()
    (stale / "r1").mkdir()
    pool, _ = CgroupPool.create()
    try:
        assert not stale.exists()
    finally:
        pool.close()
        for d in (stale / "r1", stale):
            if d.exists():
                d.rmdir()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandbox", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_cli_prints_the_result_as_json(tmp_path):
    (tmp_path / "sol.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "tests.py").write_text("def check(candidate):\n    assert candidate(1, 2) == 3\n"
                                       "    assert candidate(2, 2) == 5\n")
    done = _cli("--solution", str(tmp_path / "sol.py"), "--tests", str(tmp_path / "tests.py"), "--entry-point", "add")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "completed" and out["passed"] == 1 and out["total"] == 2 and out["pass_fraction"] == 0.5
    assert out["backend"] == "bubblewrap"


def test_cli_reports_an_unavailable_backend():
    done = _cli("--check", "--backend", "docker", "--docker-image", "genselect-sandbox:does-not-exist")
    assert done.returncode == 2 and "sandbox unavailable" in done.stderr


def test_sandbox_imports_nothing_from_the_rest_of_the_repository():
    """Statically (every import in sandbox/) and dynamically (a fresh interpreter importing every module)."""
    own = {"core", "actors", "driver", "cluster", "configs", "benchmarks", "tests"}
    modules = []
    for path in sorted((REPO / "sandbox").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.split(".")[0] in own], (path, names)
        modules.append(".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"))
    code = (f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
            f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(own)!r})\nassert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
