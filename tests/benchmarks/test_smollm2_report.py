"""benchmarks/smollm2.py: the run's summary read from the files a run writes (the run itself is
tests/test_e2e_smollm2.py), and the memory sampler on a real process tree."""
import json
import subprocess
import sys
import time

from benchmarks.smollm2 import MemorySampler, keep_evals, report


def test_report_reads_the_curve_the_step_split_and_the_sync_check(tmp_path):
    evals = [{"step": s, "kind": "eval", "genselect": g, "genselect_lo": 0.0, "genselect_hi": 0.5, "majority": 0.37,
              "random": 0.37, "pass_at_n": 1.0, "parse_failure_rate": p, "prompts": 28, "problems": 7}
             for s, g, p in ((0, 0.0, 1.0), (3, 0.1, 0.8))]
    train = [{"step": s, "kind": "train", "time/step_s": t, "time/generate_s": t / 2, "time/train_s": t / 3,
              "time/sync_s": 1.0, "throughput/tokens_per_s": 10.0 * s, "reward/all_groups_mean": 0.0,
              "sync/logprob_max_abs_diff": d} for s, t, d in ((1, 30.0, 2e-5), (2, 40.0, 5e-5), (3, 60.0, 1e-5))]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in evals[:1] + train + evals[1:]))
    (tmp_path / "summary.json").write_text(json.dumps({"dataset": "ds"}))
    sampler = MemorySampler(0)
    sampler.peak_total, sampler.peak_process = 3 * 2 ** 30, (2 ** 30, "VLLM::EngineCore")
    out = report(tmp_path, 100.0, sampler, (5.0, 6.0), ["python", "-m", "driver.train", "smollm2"])
    assert [c["step"] for c in out["heldout_curve"]] == [0, 3] and out["heldout_curve"][1]["genselect"] == 0.1
    assert out["median_step_split_s"] == {"step": 40.0, "generate": 20.0, "train": 40.0 / 3, "sync": 1.0}
    assert out["tokens_per_s_median"] == 20.0 and out["sync_logprob_max_abs_diff_max"] == 5e-5
    assert out["peak_rss_tree_gib"] == 3.0 and out["peak_rss_process"]["process"] == "VLLM::EngineCore"
    assert [s["step"] for s in out["per_step"]] == [1, 2, 3]
    assert out["heldout_curve"][0]["test/knockout/genselect"] is None  # a set the run did not read


def test_kept_evals_are_a_folder_driver_compare_reads(tmp_path):
    from driver.compare import eval_records

    rows = [{"step": 0, "kind": "eval", "genselect": 0.4, "scores": {"problem_id": ["p0"], "genselect": [1.0]}},
            {"step": 1, "kind": "train", "time/step_s": 9.0},
            {"step": 2, "kind": "eval", "genselect": 0.6, "scores": {"problem_id": ["p0"], "genselect": [0.0]}}]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    kept = keep_evals(tmp_path / "run", tmp_path / "kept")
    assert kept == tmp_path / "kept" / "metrics.jsonl"
    assert eval_records(tmp_path / "kept") == [rows[0], rows[2]]


def test_the_sampler_sees_the_children_of_the_process_it_watches():
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'x = bytearray(200 << 20); " \
           "import time; time.sleep(3)']); time.sleep(3)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    sampler = MemorySampler(proc.pid, every=0.2)
    sampler.start()
    proc.wait()
    time.sleep(0.5)
    sampler.stop.set()
    assert sampler.peak_process[0] > 200 << 20 and sampler.peak_total > sampler.peak_process[0]
