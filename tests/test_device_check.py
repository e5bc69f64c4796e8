"""scripts/device_check.sh --device cpu: the versions tier reports what imports, the IPC round trip runs between two
processes (bucket files on /dev/shm in place of CUDA IPC), and every tier that needs CUDA is skipped saying so; with
--cpu-too the CUDA tiers' own code runs on CPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_device_check_on_cpu_runs_what_it_can_and_skips_the_rest_with_the_reason(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(["sh", str(ROOT / "scripts" / "device_check.sh"), "--device", "cpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = {r["tier"]: r for r in map(json.loads, (tmp_path / "device_check.jsonl").read_text().splitlines())}
    assert list(results) == ["versions", "ipc_roundtrip", "learner_ipc", "vllm_ipc", "ray_smoke"]
    versions = results["versions"]
    assert versions["status"] == "ok" and versions["found"]["torch"] and versions["have"]["cuda"] is False
    assert results["ipc_roundtrip"]["status"] == "ok" and "every byte equal" in results["ipc_roundtrip"]["note"]
    for tier in ("learner_ipc", "vllm_ipc", "ray_smoke"):
        assert results[tier]["status"] == "skipped" and "needs CUDA (--device cpu)" in results[tier]["note"]
    assert "tier           status" in done.stdout  # the closing table


def test_device_check_refuses_an_unknown_tier():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_check.py"), "--tiers", "warp_drive"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown tiers ['warp_drive']" in done.stderr


@pytest.mark.slow
def test_device_check_cuda_tiers_run_on_cpu_with_cpu_too(tmp_path):
    """--cpu-too runs the learner and engine tiers' own code on CPU (fp32, IPC buckets as /dev/shm files): the real
    ZeRO-3 learner's exported weights give a receiver process and a real vLLM engine the learner's log-probs."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(["sh", str(ROOT / "scripts" / "device_check.sh"), "--device", "cpu", "--cpu-too",
                           "--tiers", "learner_ipc,vllm_ipc"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = {r["tier"]: r for r in map(json.loads, (tmp_path / "device_check.jsonl").read_text().splitlines())}
    for tier in ("learner_ipc", "vllm_ipc"):
        assert results[tier]["status"] == "ok" and results[tier]["max_logprob_gap"] < 1e-4, results[tier]
