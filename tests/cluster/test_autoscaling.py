"""Autoscaling, for real, on one machine: `python -m cluster.autoscale local_autoscale` starts a head node
alone with Ray's fake multi-node autoscaler, whose worker node types mirror the KubeRay worker groups
(learner, rollout, verifier; min 0). The smoke job, submitted with the cluster's token (a wrong one is refused),
asks for a placement group pinned to those types: the autoscaler must add the nodes, the job must finish on
them, and the idle nodes must be removed after the idle timeout. The times are recorded (BENCHMARKS.md)."""
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

from core.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent.parent
IDLE_TIMEOUT_S = 10


@pytest.fixture
def autoscaling_head(tmp_path, cluster_helpers):
    token = tmp_path / "token"
    dashboard = free_port()
    ray_temp = tempfile.mkdtemp(prefix="ra", dir="/tmp")  # short: Ray's socket paths live under it
    proc = subprocess.Popen([sys.executable, "-m", "cluster.autoscale", "local_autoscale", f"--port={free_port()}",
                             f"--dashboard-port={dashboard}", f"--token-file={token}",
                             f"--idle-timeout-s={IDLE_TIMEOUT_S}", f"--temp-dir={ray_temp}"],
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
        shutil.rmtree(ray_temp, ignore_errors=True)


def _alive_workers(client) -> dict:
    return {nid: res for nid, (state, res) in client.nodes().items() if state == "ALIVE" and "CPU" in res
            and any(k.endswith("_node") for k in res)}


ACTOR_NODE_TYPES = {"Learner": "learner_node", "RolloutWorker": "rollout_node", "VerifierPool": "verifier_node"}


def _node_type(resources: dict):
    """The worker type a node's resources name (`learner_node`, ...), or None."""
    return next((k for k in resources if k.endswith("_node")), None)


def test_autoscaling_adds_the_worker_groups_for_the_job_and_removes_them_when_idle(autoscaling_head, tmp_path,
                                                                                 cluster_helpers):
    h, client = cluster_helpers, autoscaling_head
    assert _alive_workers(client) == {}, "the head must start alone"
    # token auth is on (as a Ray 2.60 `ray start --head` turns it on when it finds a token): a wrong one is refused
    assert client.refuses_a_wrong_token()
    run_dir = tmp_path / "run"
    submitted = time.time()
    # the code is read in place (PYTHONPATH), not uploaded: the fake provider's nodes share the head's session
    # directory, so one node's runtime-env agent deleting its copy of an uploaded working_dir pulls the current
    # directory from under another node's actor (seen: FileNotFoundError from os.getcwd in RolloutWorker.__init__)
    client.submit("autoscaled", run_dir, "steps=2", "cluster.topology=local_autoscale",
                  "cluster.placement_timeout_s=300", *h["PINS"], working_dir=False)
    workers = h["wait_for"](lambda: len(_alive_workers(client)) >= 3 and _alive_workers(client), 300,
                            "the autoscaler to add the learner, rollout and verifier nodes", every=2)
    nodes_up_s = time.time() - submitted
    assert {_node_type(res) for res in workers.values()} == set(ACTOR_NODE_TYPES.values()), workers

    seen = dict(workers)  # every worker node ever seen alive: node id -> resources

    def used():
        """Each actor on an added node of its own type. Nodes are read again at every poll (under load the
        autoscaler may add a second rollout node, max_replicas 2, after the first three are up), and actors
        of any state count (a short job may end between two polls)."""
        seen.update(_alive_workers(client))
        actors = client.alive_actors(alive=False)
        return all(_node_type(seen.get(actors.get(cls), {})) == kind for cls, kind in ACTOR_NODE_TYPES.items())
    try:
        h["wait_for"](used, 300, "the actors to run on the added nodes", every=2)
    except pytest.fail.Exception as err:
        raise AssertionError(f"{err}\nactors: {client.alive_actors(alive=False)}\nworker nodes seen: {seen}\n"
                             f"job status: {client.status('autoscaled')}, logs: {client.logs('autoscaled')}") from None
    used_s = time.time() - submitted
    assert client.wait("autoscaled") == "SUCCEEDED", client.logs("autoscaled")
    finished = time.time()
    assert [r["step"] for r in h["train_records"](run_dir)] == [1, 2]
    assert (run_dir / "export" / "config.json").exists()  # the job's final export, written by the driver
    h["wait_for"](lambda: not _alive_workers(client), IDLE_TIMEOUT_S + 120, "the idle nodes to be removed", every=2)
    removed_s = time.time() - finished

    report = {"submit_to_nodes_alive_s": nodes_up_s, "submit_to_actors_on_new_nodes_s": used_s,
              "job_end_to_nodes_removed_s": removed_s, "idle_timeout_s": IDLE_TIMEOUT_S,
              "submit_to_job_end_s": finished - submitted}
    out = Path(os.environ.get("GENSELECT_BENCH_OUT", tmp_path)) / "autoscaling.json"
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
