"""Autoscaling, for real, on one machine: `python -m cluster.autoscale local_autoscale` starts a head node
alone with Ray's fake multi-node autoscaler, whose worker node types mirror the KubeRay worker groups
(learner, rollout, verifier; min 0). The smoke job, submitted with the cluster's token, asks for a
placement group pinned to those types: the autoscaler must add the nodes, the job must finish on them, and
the idle nodes must be removed after the idle timeout. The times are recorded (BENCHMARKS.md)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent.parent
IDLE_TIMEOUT_S = 10


@pytest.fixture
def autoscaling_head(tmp_path, cluster_helpers):
    token = tmp_path / "token"
    dashboard = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cluster.autoscale", "local_autoscale", f"--port={free_port()}",
                             f"--dashboard-port={dashboard}", f"--token-file={token}",
                             f"--idle-timeout-s={IDLE_TIMEOUT_S}"],
                            cwd=ROOT, stdout=open(tmp_path / "head.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    client = cluster_helpers["RayClient"](f"http://127.0.0.1:{dashboard}",
                                          {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    try:
        cluster_helpers["wait_for"](lambda: proc.poll() is not None or client.run("job", "list", check=False)
                                    .returncode == 0, 180, "the head's job server", every=2)
        assert proc.poll() is None, (tmp_path / "head.log").read_text()[-3000:]
        yield client
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        os.killpg(proc.pid, signal.SIGKILL)  # the fake worker nodes are in the head's process group
        proc.wait()


def _alive_workers(client) -> dict:
    return {nid: res for nid, (state, res) in client.nodes().items() if state == "ALIVE" and "CPU" in res
            and any(k.endswith("_node") for k in res)}


def test_autoscaling_adds_the_worker_groups_for_the_job_and_removes_them_when_idle(autoscaling_head, tmp_path,
                                                                                 cluster_helpers):
    h, client = cluster_helpers, autoscaling_head
    assert _alive_workers(client) == {}, "the head must start alone"
    run_dir = tmp_path / "run"
    submitted = time.time()
    client.submit("autoscaled", run_dir, "steps=2", "cluster.topology=local_autoscale",
                  "cluster.placement_timeout_s=300", *h["PINS"])
    workers = h["wait_for"](lambda: len(_alive_workers(client)) >= 3 and _alive_workers(client), 300,
                            "the autoscaler to add the learner, rollout and verifier nodes", every=2)
    nodes_up_s = time.time() - submitted
    types = sorted(next(k for k in res if k.endswith("_node")) for res in workers.values())
    assert types == ["learner_node", "rollout_node", "verifier_node"]

    def used():
        actors = client.alive_actors()
        return all(actors.get(c) in workers for c in ("Learner", "RolloutWorker", "VerifierPool"))
    h["wait_for"](used, 300, "the actors to run on the added nodes", every=2)
    used_s = time.time() - submitted
    assert client.wait("autoscaled") == "SUCCEEDED", client.logs("autoscaled")
    finished = time.time()
    assert [r["step"] for r in h["train_records"](run_dir)] == [1, 2]
    h["wait_for"](lambda: not _alive_workers(client), IDLE_TIMEOUT_S + 120, "the idle nodes to be removed", every=2)
    removed_s = time.time() - finished

    report = {"submit_to_nodes_alive_s": nodes_up_s, "submit_to_actors_on_new_nodes_s": used_s,
              "job_end_to_nodes_removed_s": removed_s, "idle_timeout_s": IDLE_TIMEOUT_S,
              "submit_to_job_end_s": finished - submitted}
    out = Path(os.environ.get("GENSELECT_BENCH_OUT", tmp_path)) / "autoscaling.json"
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
