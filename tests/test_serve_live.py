"""serve.live: the selection service runs beside a real training run (the smoke config through
`python -m driver.train`), and every policy version the weight sync pushes into the rollout engines reaches the
serving replica too; the answers say which version produced them.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.net import rendezvous_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent


def test_live_serving_follows_the_training_run(tmp_path):
    import requests

    # a port outside the ephemeral range, so no connection the run opens before serving starts can take it
    port, run_dir = rendezvous_port("127.0.0.1"), tmp_path / "run"
    cmd = [sys.executable, "-m", "driver.train", "smoke", f"run_dir={run_dir}", "serve.live=true",
           f"serve.port={port}", "serve.num_cpus=0", "steps=3", "checkpoint_every=100"]
    log = open(tmp_path / "train.out", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url, health, answers, statuses = f"http://127.0.0.1:{port}", [], [], []
    body = {"problem": "What is 12 + 30?", "candidates": ["42", "43", "41"], "samples": 2, "temperature": 1.0}
    deadline = time.time() + 900
    try:
        while proc.poll() is None and time.time() < deadline:
            try:  # the proxy answers before the app is deployed (404), or holds requests until a replica is up
                h = requests.get(url + "/healthz", timeout=10)
            except requests.RequestException:
                h = None
            if h is None or h.status_code != 200:
                time.sleep(0.5)
                continue
            health.append(h.json()["policy_version"])
            try:
                r = requests.post(url + "/v1/select", json=body, timeout=60)
                statuses.append(r.status_code)
                if r.status_code == 200:
                    answers.append(r.json()["policy_version"])
            except requests.RequestException:
                statuses.append(-1)
            time.sleep(0.3)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
        log.close()
    out = (tmp_path / "train.out").read_text()
    assert proc.returncode == 0, out[-4000:]
    assert "[serve]" in out
    trained = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    final = max(r.get("policy_version", 0) for r in trained)
    print(f"\nlive serving: training reached version {final}; /healthz saw {sorted(set(health))}, "
          f"answers carried {sorted(set(answers))} ({len(answers)} answers)")
    while statuses and statuses[-1] != 200:  # the run deletes the app as it ends
        statuses.pop()
    assert statuses and set(statuses) == {200}, statuses  # never an error, also while weights are swapped
    assert answers and answers[0] == 0
    assert max(answers) >= 1 and len(set(answers)) >= 2, "the served weights never followed the training run"
    assert answers == sorted(answers)  # one replica: versions only go up
    assert max(health) <= final
    assert json.loads((run_dir / "summary.json").read_text())["policy_version"] == final
