"""benchmarks/learner_gpu.py, the first GPU check of the learner path, in its CPU quick mode: every section runs
and its checks hold, nothing imports ray or vllm (the device has neither), the closing table is printed; its
result bookkeeping turns exceptions and false checks into statuses; the two-process probe's harness on gloo."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """(results by (section, case), stdout) of `learner_gpu.py --device cpu` in a subprocess."""
    out = tmp_path_factory.mktemp("learner_gpu") / "results.jsonl"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "learner_gpu.py"), "--device", "cpu",
                           "--out", str(out)], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {(r["section"], r["case"]): r for r in rows}, proc.stdout


def test_every_section_runs_on_the_cpu_and_its_checks_hold(quick_run):
    results, stdout = quick_run
    statuses = {key: r["status"] for key, r in results.items()}
    assert statuses.pop(("nccl_one_gpu", "two_ranks_one_gpu")) == "skipped"  # no CUDA here
    assert set(statuses.values()) == {"ok"}, {k: (r["status"], r.get("error"), r.get("failed_checks"))
                                              for k, r in results.items() if r["status"] != "ok"}
    assert all(v == "ok" for v in results[("env", "versions")]["imports"].values())
    for case in ("zero2_bfloat16", "zero2_float32", "zero3_bfloat16", "zero3_float32"):
        r = results[("learner", case)]
        assert r["checks"] and all(r["checks"].values())  # finite metrics, weights changed, export equal, ...
        assert r["metadata_tensors"] == r["expected_tensors"] and r["metadata_mismatches"] == []
        assert r["updates"] == 2 and r["max_weight_change"] > 0 and r["export_max_abs_diff"] == 0.0
    assert results[("learner", "logprobs_T1.5_zero2_float32")]["max_abs_diff"] < 1e-4
    assert results[("learner", "logprobs_T1.5_zero2_bfloat16")]["max_abs_diff"] < 0.05
    assert results[("packed", "W256_logprob_agreement")]["max_abs_diff_float32"] < 1e-4
    for width in (256, 512):
        for mode in ("blocks", "dense"):
            assert results[("packed", f"W{width}_{mode}")]["step_s_median"] > 0
    summary = results[("summary", "run")]
    assert summary["status"] == "ok" and summary["forbidden_modules_loaded"] == []
    table = stdout[stdout.rindex("section "):]  # the closing table: one line per result
    assert len(table.splitlines()) == len(results) + 1 and "zero3_bfloat16" in table


def test_a_case_that_raises_or_fails_a_check_is_reported_and_the_next_one_runs(tmp_path):
    from benchmarks.learner_gpu import Report

    report = Report(tmp_path / "r.jsonl", "test")
    report.case("s", "raises", lambda: 1 / 0)
    report.case("s", "fails", lambda: {"x": 1.5, "checks": {"good": True, "bad": False}})
    report.case("s", "passes", lambda: {"x": 2.0, "checks": {"good": True}})
    raised, failed, passed = (json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines())
    assert raised["status"] == "error" and raised["error"].startswith("ZeroDivisionError")
    assert failed["status"] == "fail" and failed["failed_checks"] == ["bad"]
    assert passed["status"] == "ok" and passed["x"] == 2.0
    assert "failed_checks=['bad']" in report.table()


def test_the_two_rank_probe_harness_reports_a_working_all_reduce_on_gloo():
    from benchmarks.learner_gpu import two_rank_all_reduce

    result = two_rank_all_reduce("gloo", "cpu", timeout_s=60)
    assert result["answer"] == "works", result
    assert result["killed_after_timeout"] == [] and result["exitcodes"] == [0, 0]
