"""benchmarks/system_study.py (the Best-of-N system study) and its report. The stages are the real entry points
(driver.train generator / default, driver.synth, driver.evaluate, driver.bon), each tested for real elsewhere
(tests/test_e2e_generator.py, tests/data/test_synth_generator.py, tests/test_e2e.py,
tests/driver/test_generator_bon.py); here a fake
`subprocess.run` writes what each one writes, to test the study's order, hand-offs, resume and report."""
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import system_study as study
from benchmarks.system_report import maxk_observation


def _summary(p1_start, p1_end, pk_start, pk_end, model="base-folder"):
    curve = lambda p1, pk: {"1": p1, "2": (p1 + pk) / 2, "4": pk}  # noqa: E731
    return {"k": 4, "steps": 2, "step_seconds": 1.5, "start_model": model,
            "start_pass_at_1": p1_start, "start_pass_at_1_ci": [p1_start - 0.01, p1_start + 0.01],
            "final_pass_at_1": p1_end, "final_pass_at_1_ci": [p1_end - 0.01, p1_end + 0.01],
            "start_pass_at_n": pk_start, "start_pass_at_n_ci": [pk_start - 0.05, pk_start + 0.05],
            "final_pass_at_n": pk_end, "final_pass_at_n_ci": [pk_end - 0.05, pk_end + 0.05],
            "start_pass_curve": curve(p1_start, pk_start), "final_pass_curve": curve(p1_end, pk_end),
            "start_majority_curve": curve(p1_start, p1_start), "final_majority_curve": curve(p1_end, p1_end)}


GENERATORS = {"grpo": _summary(0.10, 0.15, 0.60, 0.50), "maxk": _summary(0.10, 0.11, 0.60, 0.62),
              "bon_rlb": _summary(0.10, 0.12, 0.60, 0.60)}


def _evaluation(genselect):
    return {"prompts": 10, "problems": 5, "parse_failure_rate": 0.0,
            **{k: v for key, val in (("genselect", genselect), ("majority", 0.4), ("random", 0.3), ("pass_at_1", 0.3),
                                     ("pass_at_n", 1.0))
               for k, v in ((key, val), (f"{key}_lo", val - 0.1), (f"{key}_hi", val + 0.1))},
            "by_size": {"2": {"prompts": 6, "genselect": genselect, "majority": 0.5, "random": 0.5, "pass_at_n": 1.0},
                        "4": {"prompts": 4, "genselect": genselect, "majority": 0.3, "random": 0.25, "pass_at_n": 1.0}}}


def _bon(selector_accuracy):
    cell = lambda v: {"mean": v, "lo": v - 0.05, "hi": v + 0.05}  # noqa: E731
    return {"problems": 90, "excluded_problems": 10, "draws": 8, "judged_subsets": 100, "subsets": 300,
            "parse_failures": 0, "curves": {"selector": {"2": cell(selector_accuracy), "4": cell(selector_accuracy)},
                                            "majority": {"2": cell(0.2), "4": cell(0.25)},
                                            "random": {"2": cell(0.1), "4": cell(0.1)},
                                            "pass": {"2": cell(0.2), "4": cell(0.35)}}}


class FakeStages:
    """Stands in for `subprocess.run` of each stage: writes the file that stage writes, records the call."""

    def __init__(self, fail=None):
        self.calls, self.commands, self.fail = [], [], fail

    def __call__(self, command, cwd, stdout, stderr):
        self.commands.append(command)
        args = command[3:] if command[1] == "-m" else command
        entry = command[2]
        self.calls.append((entry, args[0] if args else None))
        opts = dict(a.split("=", 1) for a in args if "=" in a)
        if self.fail and self.fail in " ".join(command):
            stdout.write("Traceback: something broke\n")
            return subprocess.CompletedProcess(command, 1)
        if entry == "driver.train" and args[0] == "generator":
            objective = opts["algorithm.advantage.name"]
            run = Path(opts["run_dir"])
            (run / "export").mkdir(parents=True)
            (run / "summary.json").write_text(json.dumps(GENERATORS[objective]))
            (run / "eval_samples").mkdir()
            for step in (0, int(opts["steps"])):
                (run / "eval_samples" / f"step{step}.jsonl").write_text("{}\n")
        elif entry == "driver.synth":
            stdout.write(f"manifest ...\n\ndataset folder: /data/{Path(opts['data.generator']).parent.name}"
                         f"-{opts['data.max_candidates']}\n")
        elif entry == "driver.train":
            run = Path(opts["run_dir"])
            (run / "export").mkdir(parents=True)
            (run / "summary.json").write_text("{}")
        elif entry == "driver.evaluate":
            out = command[command.index("--out") + 1]
            Path(out).write_text(json.dumps(_evaluation(0.6 if "selector-strong" in command[4] else 0.45)))
        elif entry == "driver.bon":
            assert Path(command[command.index("--samples") + 1]).exists()
            out = command[command.index("--out") + 1]
            Path(out).write_text(json.dumps(_bon(0.15 if "step0" in command[command.index("--samples") + 1] else 0.18)))
        return subprocess.CompletedProcess(command, 0)


def _stand_in(monkeypatch, fake):
    """The study's own `subprocess` only: patching the shared module's `run` would also catch matplotlib's font
    scan (`fc-list`, run on its first import on a machine without a font cache) and fail the report."""
    monkeypatch.setattr(study, "subprocess", SimpleNamespace(run=fake, STDOUT=subprocess.STDOUT))


def test_the_study_runs_its_stages_in_order_hands_the_results_on_and_resumes(tmp_path, monkeypatch, capsys):
    fake = FakeStages()
    _stand_in(monkeypatch, fake)
    out = tmp_path / "study"
    assert study.main(["--out", str(out), "--gen-steps", "2", "--k", "4"]) == 0
    assert [c[0] for c in fake.calls] == ["driver.train"] * 3 + ["driver.synth"] * 4 + ["driver.train"] * 2 + \
        ["driver.evaluate"] * 3 + ["driver.bon"] * 4
    dataset = lambda name: json.loads((out / f"synth-{name}.json").read_text())["dataset"]  # noqa: E731
    assert dataset("weak-train") == "/data/-8" and dataset("weak-eval") == "/data/-16"  # the base generator's
    # the strong generator is the trained one with the highest final pass@1 (grpo here)
    assert dataset("strong-train") == "/data/gen-grpo-8" and dataset("strong-eval") == "/data/gen-grpo-16"
    evaluated = [c for c in fake.commands if c[2] == "driver.evaluate"]
    assert [c[c.index("--dataset") + 1] for c in evaluated] == ["/data/-16", "/data/gen-grpo-16", "/data/gen-grpo-16"]
    trained = [c for c in fake.commands if c[2] == "driver.train" and c[3] == "selector"]
    assert all("data.max_candidates=8" in c for c in trained)
    report = (out / "report.md").read_text()
    assert "trained with **grpo**" in report and "| weak-on-strong | 4 | 4 | 0.450 | 0.300 | 0.250 | 1.000 |" in report
    assert "lowers pass@4: yes; max@k keeps pass@4 better than GRPO: yes" in report
    assert (out / "generators.png").stat().st_size > 0 and (out / "system.png").stat().st_size > 0
    # Best-of-N over all problems: the base generator (the first run's step 0) and each trained one (its last
    # step), all with the weak selector, its training problems left out
    bons = [c for c in fake.commands if c[2] == "driver.bon"]
    assert [Path(c[c.index("--samples") + 1]).relative_to(out).as_posix() for c in bons] == [
        "gen-grpo/eval_samples/step0.jsonl", "gen-grpo/eval_samples/step2.jsonl", "gen-maxk/eval_samples/step2.jsonl",
        "gen-bon_rlb/eval_samples/step2.jsonl"]
    assert all("selector-weak" in c[c.index("--selector") + 1] and c[c.index("--exclude") + 1] == "/data/-8"
               and c[c.index("--ks") + 1] == "2,4" for c in bons)
    assert "| base | 2 | 0.150 [0.100, 0.200] | 0.200 [0.150, 0.250] |" in report
    assert "| maxk | 4 | 0.180 [0.130, 0.230] |" in report and "90 (10)" in report
    assert (out / "bon.png").stat().st_size > 0
    ran = json.loads((out / "times.json").read_text())
    fake.calls.clear()
    assert study.main(["--out", str(out), "--gen-steps", "2", "--k", "4"]) == 0  # every stage done: none rerun
    assert fake.calls == []
    assert json.loads((out / "times.json").read_text()) == ran and len(ran) == 16  # the times of when they ran
    assert "done before" in capsys.readouterr().out


def test_a_failed_stage_stops_the_study_with_the_end_of_its_log(tmp_path, monkeypatch):
    _stand_in(monkeypatch, FakeStages(fail="driver.synth"))
    with pytest.raises(SystemExit, match="(?s)synth-weak-train.*failed.*something broke"):
        study.main(["--out", str(tmp_path / "s")])
    assert (tmp_path / "s" / "gen-grpo" / "summary.json").exists()  # what finished is kept for the rerun


def test_bad_arguments_are_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    fake = FakeStages()
    _stand_in(monkeypatch, fake)
    for argv in (["--objectives", "ppo"], ["--k", "1"]):
        with pytest.raises(SystemExit):
            study.main(["--out", str(tmp_path / "s"), *argv])
    assert fake.calls == [] and "ppo" in capsys.readouterr().err


def test_the_stage_commands():
    s = study.Settings(Path("/o"))
    grpo, bon = study.generator_command(s, "grpo"), study.generator_command(s, "bon_rlb")
    assert "algorithm.advantage.name=grpo" in grpo and "eval_samples=64" in grpo and "learner.lr=0.0003" in grpo
    assert "algorithm.overlong_filtering=true" in bon and "algorithm.overlong_filtering=true" not in grpo
    # the selector trains on exactly the dataset the synthesis built (same data overrides: same dataset hash)
    data = [a for a in study.selector_command(s, "weak", "/g") if a.startswith(("data.", "rollout."))]
    assert data == study.synth_command(s, "/g", 8)[4:] and "data.generator=/g" in data
    assert "rollout.constrain_index=false" in study.synth_command(s, "/g", 16)  # 16 indices: not one token each
    assert "--knockout-window" in study.evaluate_command(Path("/sel"), "/d", Path("/e.json"))


def test_the_max_at_k_observation_is_read_with_the_noise_of_a_re_evaluation():
    assert "pass@1 and lowers pass@4: yes; max@k keeps pass@4 better than GRPO: yes" in maxk_observation(GENERATORS)
    flat = {"grpo": _summary(0.10, 0.105, 0.60, 0.58), "maxk": _summary(0.10, 0.10, 0.60, 0.45)}
    said = maxk_observation(flat)
    assert "lowers pass@4: no" in said and "(flat)" in said and "better than GRPO: no" in said
    assert maxk_observation({"grpo": GENERATORS["grpo"]}).startswith("Not tested")


def test_a_given_selector_runs_best_of_n_only_with_its_dataset_and_start_model_left_out(tmp_path, monkeypatch):
    """`--selector RUN`: no selection data is synthesised and no selector trained; Best-of-N uses RUN's export and
    leaves out the problems of RUN's dataset and of its start model's pretraining."""
    fake = FakeStages()
    _stand_in(monkeypatch, fake)
    run = tmp_path / "default"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"export": str(run / "export"), "dataset": "/data/cued",
                                                   "start_model": "/models/ws"}))
    out = tmp_path / "study"
    assert study.main(["--out", str(out), "--gen-steps", "2", "--k", "4", "--objectives", "grpo",
                       "--selector", str(run)]) == 0
    assert [entry for entry, _ in fake.calls] == ["driver.train", "driver.bon", "driver.bon"]
    for command in (c for c in fake.commands if c[2] == "driver.bon"):
        assert command[command.index("--selector") + 1] == str(run / "export")
        assert [command[i + 1] for i, a in enumerate(command) if a == "--exclude"] == ["/data/cued", "/models/ws"]
    report = (out / "report.md").read_text()
    assert f"The selector of the run `{run}`" in report and "## Generator + selector" not in report
    calls = len(fake.calls)
    with pytest.raises(SystemExit, match="no summary.json"):
        study.main(["--out", str(tmp_path / "other"), "--selector", str(tmp_path / "nothing")])
    assert len(fake.calls) == calls  # refused before any stage ran
