"""The main job through `ray job submit` on a running Ray cluster (a real head node started by the test,
joined through the job's RAY_ADDRESS): the same driver that runs on a laptop, as a cluster user runs it.
The head runs with token authentication, as a Ray 2.60 `ray start --head` does when it finds a token:
the head and the client get RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH (cluster.local.auth_env)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cluster.local import auth_env
from core.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent.parent
RAY = str(Path(sys.executable).with_name("ray"))
ENV = dict(os.environ)


@pytest.fixture
def head_node():
    """A Ray head node (2 CPUs, dashboard with the job server, token auth) in its own process group."""
    port, dashboard = free_port(), free_port()
    temp_dir = tempfile.mkdtemp(prefix="rayjob", dir="/tmp")  # short: Ray's socket paths live under it
    ENV.update(auth_env(os.path.join(temp_dir, "token")))
    proc = subprocess.Popen([RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             f"--temp-dir={temp_dir}",
                             "--include-dashboard=true", "--dashboard-host=127.0.0.1",
                             f"--dashboard-port={dashboard}", f"--dashboard-agent-listen-port={free_port()}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=ENV)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            ok = subprocess.run([RAY, "job", "list", "--address", address], capture_output=True, text=True, env=ENV)
            if ok.returncode == 0:
                break
            assert proc.poll() is None, "ray start --head exited"
            time.sleep(2)
        else:
            pytest.fail("the Ray head node's job server did not come up in 180 s")
        yield address
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_smoke_job_runs_through_ray_job_submit(head_node, tmp_path):
    wrong = subprocess.run([RAY, "job", "list", "--address", head_node], capture_output=True, text=True,
                           env={**{k: v for k, v in ENV.items() if k != "RAY_AUTH_TOKEN_PATH"},
                                "RAY_AUTH_TOKEN": "not-the-token"})
    assert wrong.returncode != 0 and "token" in (wrong.stdout + wrong.stderr).lower()
    run_dir = tmp_path / "run"
    cache = ROOT / ".cache"
    # the job's own env var (the DeepSpeed op build cache, reused) must not clash with the driver's defaults
    runtime_env = {"env_vars": {"TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions")}}
    cmd = [RAY, "job", "submit", "--address", head_node, "--working-dir", str(ROOT),
           "--runtime-env-json", json.dumps(runtime_env), "--",
           sys.executable, "-m", "driver.train", "smoke", f"run_dir={run_dir}", "steps=2",
           f"model.cache_dir={cache / 'models'}", f"data.out_dir={cache / 'datasets'}"]
    job = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500, env=ENV)
    assert job.returncode == 0, job.stdout[-4000:] + job.stderr[-4000:]
    assert "succeeded" in job.stdout.lower()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2
    assert (run_dir / "export" / "config.json").exists()
