"""End-to-end: the real actor system (vLLM rollout, verifier pool, DeepSpeed learner, weight sync, Ray,
asynchrony, checkpoints) runs the smoke config through `python -m driver.train`, as a user would.

Faults are real, three in one run, each followed by a resume: the learner process dies (the run must stop with a
clear error that says how to continue); the driver process tree is SIGKILLed mid-run; a rollout actor's process
dies while training (Ray restarts it; its prompts are issued again). The finished run must have trained exactly
the prompts of an uninterrupted one.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.records import SelectionTask
from driver.stream import PromptStream

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent


def _cmd(run_dir, *overrides):
    return [sys.executable, "-m", "driver.train", "smoke", f"run_dir={run_dir}", *overrides]


def _run(run_dir, *overrides, timeout=1500, **kwargs):
    """`python -m driver.train smoke` in a subprocess; kwargs go to subprocess.run (env, start_new_session)."""
    return subprocess.run(_cmd(run_dir, *overrides), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          **kwargs)


def _records(run_dir, kind):
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def _consumed(run_dir):
    return [json.loads(l) for l in (Path(run_dir) / "consumed.jsonl").read_text().splitlines() if l.strip()]


def _shm():
    return set(os.listdir("/dev/shm"))


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("smoke") / "run"
    shm_before = _shm()
    proc = _run(run_dir, "export_every=2", "logging.backends=[tensorboard,mlflow]")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return run_dir, proc, shm_before


def test_smoke_run_trains_and_writes_every_artifact(smoke_run):
    run_dir, proc, _ = smoke_run
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("steps", "wall_seconds", "start_accuracy", "final_accuracy", "majority_accuracy",
                "random_accuracy", "pass_at_n", "time_per_step"):
        assert summary[key] is not None, key
    assert summary["steps"] == 3
    assert (Path(summary["start_model"]) / "config.json").exists()  # the model RL began from, by its folder
    assert set(summary["time_per_step"]) == {"generate_s", "verify_s", "train_s", "sync_s", "idle_s"}
    train = _records(run_dir, "train")
    assert [r["step"] for r in train] == [1, 2, 3]
    assert [r["policy_version"] for r in train] == [1, 2, 3]
    assert all(r["batch/sequences"] > 0 and r["time/sync_s"] > 0 for r in train)
    assert all(r["staleness/mean"] <= 1 for r in train)
    evals = _records(run_dir, "eval")
    assert [r["step"] for r in evals] == [0, 3]
    # the smoke config also evaluates by a knockout of pairs (eval_knockout_window: 2), through the real engine
    assert all(0 <= r["knockout/genselect"] <= 1 and r["knockout/by_size"] for r in evals)
    assert summary["final_knockout_accuracy"] == evals[-1]["knockout/genselect"]
    # and by a round robin of pairs pooled by answer (eval_round_robin: answer), from the engine's index log-probs
    assert all(0 <= r["round_robin/genselect"] <= 1 and r["round_robin/by_size"] for r in evals)
    assert summary["final_round_robin_accuracy"] == evals[-1]["round_robin/genselect"]
    assert (run_dir / "curves.png").stat().st_size > 10_000
    assert list((run_dir / "tensorboard").iterdir())
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000003"
    # export_every=2: the policy after step 2 as a Hugging Face folder beside the end's export
    assert [p.name for p in (run_dir / "exports").iterdir()] == ["step_000002"]
    assert json.loads((run_dir / "exports" / "step_000002" / "genselect_export.json").read_text()) == {
        "step": 2, "policy_version": 2}
    # logging.backends=[tensorboard,mlflow]: every step's metrics in the run's MLflow file store, the run finished
    from mlflow.tracking import MlflowClient

    from driver.trackers import mlflow_uri, read_run_ids
    client, run_id = MlflowClient(mlflow_uri(run_dir, "")), read_run_ids(run_dir)["mlflow"]
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "train.policy_version")) == [
        (1, 1.0), (2, 2.0), (3, 3.0)]
    assert client.get_run(run_id).info.status == "FINISHED"


def test_smoke_run_exports_a_model_that_transformers_loads(smoke_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    export = smoke_run[0] / "export"
    model = AutoModelForCausalLM.from_pretrained(export)
    tokenizer = AutoTokenizer.from_pretrained(export)
    ids = tokenizer("Solution 0:", return_tensors="pt").input_ids
    assert model(ids).logits.shape[-1] == model.config.vocab_size
    from core.algo.genselect import read_prompt_style
    from core.config import load_config
    from driver.data.dataset import prompt_style
    assert (export / "genselect_prompt.json").is_file()  # serving renders prompts as the run trained
    assert read_prompt_style(export) == prompt_style(load_config("smoke"))


def test_smoke_run_last_checkpoint_exports_the_final_weights(smoke_run, tmp_path):
    """python -m driver.export on the finished run: its last checkpoint (step 3) gives the weights of run_dir/export."""
    from safetensors.numpy import load_file

    from driver.export import main

    assert main([str(smoke_run[0]), "--out", str(tmp_path / "step3")]) == 0
    exported, final = (load_file(str(f / "model.safetensors")) for f in (tmp_path / "step3", smoke_run[0] / "export"))
    assert exported.keys() == final.keys() and all((exported[k] == final[k]).all() for k in final)


def test_smoke_run_uses_no_prompt_twice_and_leaks_no_shared_memory(smoke_run):
    run_dir, _, shm_before = smoke_run
    used = [i for row in _consumed(run_dir) for key in ("trained", "filtered", "stale") for i in row[key]]
    assert len(used) == len(set(used))
    leaked = _shm() - shm_before
    assert not leaked, f"/dev/shm entries left behind: {sorted(leaked)[:10]}"


def _expected_stream(run_dir):
    summary_dataset = Path(json.loads((run_dir / "summary.json").read_text())["dataset"])
    rows = [json.loads(l) for l in (summary_dataset / "train.jsonl").read_text().splitlines() if l.strip()]
    return PromptStream([SelectionTask.from_dict(r).prompt_id for r in rows], seed=0)


def _faulty(run_dir, overrides, fault: str, **kwargs):
    return _run(run_dir, *overrides, env=dict(os.environ, GENSELECT_FAULT=fault), **kwargs)


def test_three_faults_then_the_run_trains_exactly_the_uninterrupted_prompts(tmp_path):
    """One run, three real faults, each followed by `resume=auto` (as a user would rerun the command):
    1. the learner process dies at its second step: the run stops (non-zero) naming the last checkpoint and how
       to continue;
    2. resumed, the whole driver process tree is SIGKILLed right after its first checkpoint (step 2; a fault point
       in the driver kills its own process group, so the moment does not depend on the machine's speed);
    3. resumed again, a rollout actor's process dies while generating: Ray restarts it, the current weights are
       pushed into it and its prompts are issued again, and the run finishes.
    With dynamic sampling off consumption is deterministic (step k trains the k-th draw of the prompt stream), so
    the finished run must have trained, at each step, the prompts of an uninterrupted run: nothing replayed or
    skipped across the three restarts."""
    run_dir = tmp_path / "run"
    overrides = ["steps=4", "checkpoint_every=1", "algorithm.dynamic_sampling=false"]

    failed = _faulty(run_dir, overrides, f"learner_step:2:{tmp_path / 'learner.crashed'}")
    assert failed.returncode == 1, failed.stderr[-4000:]
    assert (tmp_path / "learner.crashed").exists()
    assert "training stopped: learner step 1 failed" in failed.stderr
    assert "step_000001" in failed.stderr and "resume=auto" in failed.stderr

    marker = tmp_path / "driver.killed"
    killed = _faulty(run_dir, overrides, f"driver_checkpoint:1:{marker}", start_new_session=True)
    assert killed.returncode == -signal.SIGKILL and marker.exists(), killed.stdout[-2000:] + killed.stderr[-6000:]
    assert "resumed from" in killed.stderr
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000002"
    assert [r["step"] for r in _consumed(run_dir)] == [1, 2]
    time.sleep(2)

    resumed = _faulty(run_dir, overrides, f"rollout_generate:2:{tmp_path / 'rollout.crashed'}")
    assert resumed.returncode == 0, resumed.stderr[-6000:]
    assert (tmp_path / "rollout.crashed").exists(), "the rollout fault never fired"
    assert "resumed from" in resumed.stderr
    train = _records(run_dir, "train")
    assert [r["step"] for r in train][-2:] == [3, 4]
    assert sum(r.get("rollout/reissued_calls", 0) for r in train) >= 1
    rows = _consumed(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    stream = _expected_stream(run_dir)
    for row in rows:
        assert row["trained"] == stream.take(4), f"step {row['step']} trained other prompts"
    used = [i for row in rows for key in ("trained", "filtered", "stale") for i in row[key]]
    assert len(used) == len(set(used)), "a prompt was used twice"
