"""Multi-node, for real, on one machine: `python -m cluster.local local3` starts a head and four worker
nodes (learner, two rollout, verifier) with Ray's multi-node harness and token authentication on; the
smoke job goes in through `ray job submit` with the token; the learner, the rollout engine and the verifier
pool run on different nodes, pinned by `cluster.<role>_node_resource`. Then the node holding the rollout
engine is killed mid-run: Ray moves its bundle to the spare rollout node and restarts the actor there, the
run goes on, and every prompt is used exactly once (none lost, none twice)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.net import free_port
from core.records import SelectionTask
from driver.stream import PromptStream

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent.parent
STEPS, PROMPTS = 12, 4


@pytest.fixture
def local_cluster(tmp_path):
    """(state, token file, control folder) of a running `python -m cluster.local local3`."""
    token, state, control = tmp_path / "token", tmp_path / "state.json", tmp_path / "control"
    control.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "cluster.local", "local3", "--dashboard-port", str(free_port()),
                             "--token-file", str(token), "--state", str(state), "--control", str(control)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "cluster.log", "w"),
                            start_new_session=True)
    try:
        deadline = time.time() + 180
        while not state.exists():
            assert proc.poll() is None, (tmp_path / "cluster.log").read_text()[-3000:]
            assert time.time() < deadline, "the local cluster did not start in 180 s"
            time.sleep(1)
        yield json.loads(state.read_text()), token, control, state
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)  # the nodes drain on SIGTERM
        except subprocess.TimeoutExpired:
            pass
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
        proc.wait()


def _stream_order(run_dir: Path) -> list:
    config = (run_dir / "config.yaml").read_text()
    from core.config import from_yaml

    cfg = from_yaml(config)
    dataset = Path(json.loads((run_dir / "summary.json").read_text())["dataset"])
    rows = [json.loads(l) for l in (dataset / "train.jsonl").read_text().splitlines() if l.strip()]
    return PromptStream([SelectionTask.from_dict(r).prompt_id for r in rows], seed=cfg.seed).take(10_000)


def test_multinode_smoke_job_with_token_auth_survives_the_rollout_node_dying(local_cluster, tmp_path,
                                                                            cluster_helpers):
    h = cluster_helpers
    state, token, control, state_file = local_cluster
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    client = h["RayClient"](state["dashboard"], auth)
    # token auth is on: a wrong token is refused, the cluster's token is accepted
    assert client.refuses_a_wrong_token()
    client.run("job", "list")

    run_dir = tmp_path / "run"
    submitted = time.time()
    client.submit("multinode", run_dir, f"steps={STEPS}", f"prompts_per_step={PROMPTS}", "checkpoint_every=6",
                  "algorithm.dynamic_sampling=false", *h["PINS"])
    # the actors are up once the step-0 evaluation is logged; where they run is read before training starts
    h["wait_for"](lambda: (run_dir / "metrics.jsonl").exists(), 600, "the step-0 evaluation", every=0.3)

    node_type = {n["node_id"]: n["type"] for n in state["nodes"]}
    actors_file = Path(str(state_file) + ".actors.json")
    started = lambda: json.loads(actors_file.read_text()) if actors_file.exists() else {}  # noqa: E731
    # the harness rewrites its copy of the table about once a second: wait until it lists all three by name (a count
    # of three is not enough: its JobSupervisor and the two quickest actors alone make three)
    roles = ("Learner", "RolloutWorker", "VerifierPool")
    where = h["wait_for"](lambda: set(roles) <= set(started()) and started(), 60, "the actors in the GCS table")
    placed = {cls: node_type.get(where.get(cls)) for cls in roles}
    assert placed == {"Learner": "learner", "RolloutWorker": "rollout", "VerifierPool": "verifier"}, where
    assert len({where["Learner"], where["RolloutWorker"], where["VerifierPool"]}) == 3

    # kill the node that holds the rollout engine, in the middle of the run (right after step 1)
    dead = where["RolloutWorker"]
    h["wait_for_step"](client, "multinode", run_dir, 0, 600)
    (control / "kill-actor-RolloutWorker").touch()
    killed = h["wait_for"](lambda: json.loads(state_file.read_text())["killed"], 30, "the node kill")
    assert killed[0]["node_id"] == dead
    killed_at = killed[0]["time"]
    done_before = len([r for r in h["train_records"](run_dir)])
    h["wait_for_step"](client, "multinode", run_dir, done_before, 600)
    recovered_s = time.time() - killed_at
    assert done_before < STEPS, "the run ended before the node died"
    moved = h["wait_for"](lambda: started().get("RolloutWorker") not in (None, dead) and started()["RolloutWorker"],
                          300, "the rollout actor restarted on another node", every=0.3)
    assert client.wait("multinode") == "SUCCEEDED", client.logs("multinode")
    assert client.nodes().get(dead, ("",))[0] == "DEAD"
    assert moved and moved != dead and node_type[moved] == "rollout"

    train = h["train_records"](run_dir)
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    # the dead engine was noticed either by a generation call in flight (re-issued) or, when it died between
    # calls, by the next weight sync (retried once the restarted engine answers)
    last = train[-1]
    assert last.get("rollout/reissued_calls", 0) + last.get("rollout/sync_retries", 0) >= 1, last
    rows = [json.loads(l) for l in (run_dir / "consumed.jsonl").read_text().splitlines() if l.strip()]
    used = [i for row in rows for key in ("trained", "filtered", "stale") for i in row[key]]
    assert len(used) == len(set(used)), "a prompt was used twice"
    order = _stream_order(run_dir)
    assert set(used) == set(order[:len(used)]), "a prompt was skipped (lost)"
    assert len([i for row in rows for i in row["trained"]]) == STEPS * PROMPTS

    report = {"submit_to_end_s": time.time() - submitted, "kill_to_next_step_s": recovered_s,
              "step_s": [r["time/step_s"] for r in train], "sync_s": [r["time/sync_s"] for r in train],
              "sync_gbps": [r.get("sync/gbps", 0.0) for r in train], "killed_after_step": done_before}
    out = Path(os.environ.get("GENSELECT_BENCH_OUT", tmp_path)) / "multinode.json"
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
