"""W&B (offline) and MLflow (a local file store) as metric backends: the reporter's records reach them with their
steps, the resolved config is logged once, a resume continues the same run, and nothing reaches the console."""
import json
import struct
from pathlib import Path

import pytest

from driver.report import MetricsLog
from driver.trackers import open_trackers, read_run_ids


def _config(run_dir, backend: str):
    from core.config import load_config

    return load_config("default", [f"run_dir={run_dir}", f"logging.backends=[{backend}]", "logging.wandb_mode=offline",
                                   "logging.run_name=first-try", "learner.lr=0.0003"])


def _log_then_resume(cfg, run_dir):
    """Steps 0-2 logged, the run stops after its checkpoint at step 1 and resumes there: step 2 is redone (with
    another loss) and step 3 follows."""
    first = MetricsLog(run_dir, tensorboard=False, trackers=open_trackers(cfg, run_dir, resume=False))
    first.log(0, "eval", {"genselect": 0.5, "by_size": {"2": 0.5}, "note": "text", "nan": float("nan")})
    first.log(1, "train", {"loss": 1.0, "reward/all_groups_mean": 0.25, "verifier/parse_failures": 2,
                           "verifier/parse_failures/no_judgment": 1})
    first.log(2, "train", {"loss": 0.5, "reward/all_groups_mean": 0.5})
    first.close(failed=True)
    resumed = MetricsLog(run_dir, tensorboard=False, trackers=open_trackers(cfg, run_dir, resume=True))
    resumed.resume_at(1)
    resumed.log(2, "train", {"loss": 0.75, "reward/all_groups_mean": 0.5})
    resumed.log(3, "train", {"loss": 0.125, "reward/all_groups_mean": 1.0})
    resumed.close()
    assert [r["step"] for r in resumed.records()] == [0, 1, 2, 3] and resumed.records()[2]["loss"] == 0.75


# -- W&B's offline run files: a LevelDB-style log of protobuf records ---------------------------------------------
_BLOCK, _HEADER = 32768, 7  # log block size; each chunk's header: crc32, length, type (1 full, 2 first, 3/4 rest)


def _chunks(data: bytes):
    pos = 7  # the file's own header (':W&B', magic, version)
    while pos + _HEADER <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < _HEADER:
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        yield kind, data[pos + _HEADER:pos + _HEADER + length]
        pos += _HEADER + length


def wandb_records(path: Path) -> list:
    """The protobuf records of one offline W&B run file (run-ID.wandb)."""
    from wandb.proto import wandb_internal_pb2 as pb

    records, pending = [], b""
    for kind, chunk in _chunks(path.read_bytes()):
        pending += chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _item_key(item) -> str:
    return item.key or "/".join(item.nested_key)


def wandb_run(run_file: Path) -> dict:
    """{id, history: {step: {key: value}}, config: {key: value}} of one offline W&B run file."""
    out = {"id": None, "history": {}, "config": {}}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":  # the run's config travels with it
            out["id"] = record.run.run_id
            out["config"].update({_item_key(i): json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "history":
            row = {_item_key(i): json.loads(i.value_json) for i in record.history.item}
            out["history"].setdefault(record.history.step.num, {}).update(row)
        elif kind == "config":
            out["config"].update({_item_key(i): json.loads(i.value_json) for i in record.config.update})
    return out


def test_wandb_offline_gets_each_step_the_config_once_and_a_resume_continues_the_run(tmp_path, monkeypatch, capfd):
    run_dir = tmp_path / "run"
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-files"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    _log_then_resume(_config(run_dir, "wandb"), run_dir)
    import wandb

    wandb.teardown()  # W&B's service process writes the run files behind the calls: let it finish them
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == "", "W&B wrote to the console"

    first, second = (wandb_run(f) for f in sorted((tmp_path / "wandb-files").glob("wandb/offline-run-*/run-*.wandb")))
    assert first["id"] == second["id"] == read_run_ids(run_dir)["wandb"]
    assert {s: {k: v for k, v in row.items() if not k.startswith("_")} for s, row in first["history"].items()} == {
        0: {"eval/genselect": 0.5},
        1: {"train/loss": 1.0, "train/reward/all_groups_mean": 0.25, "train/verifier/parse_failures": 2,
            "train/verifier/parse_failures/no_judgment": 1},
        2: {"train/loss": 0.5, "train/reward/all_groups_mean": 0.5}}
    assert {s: row["train/loss"] for s, row in second["history"].items()} == {3: 0.125}  # step 2 was sent already
    assert first["config"]["learner.lr"] == 0.0003 and first["config"]["logging.run_name"] == "first-try"
    assert "learner.lr" not in second["config"]  # logged once, with the first run


def test_mlflow_file_store_gets_each_step_the_params_once_and_a_resume_continues_the_run(tmp_path, capfd):
    from mlflow.tracking import MlflowClient

    from driver.trackers import mlflow_uri

    run_dir = tmp_path / "run"
    cfg = _config(run_dir, "mlflow")
    _log_then_resume(cfg, run_dir)
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == "", "MLflow wrote to the console"

    client = MlflowClient(tracking_uri=mlflow_uri(run_dir, ""))
    run_id = read_run_ids(run_dir)["mlflow"]
    assert (run_dir / "mlruns").is_dir()

    def history(key):
        return [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]

    assert history("train.loss") == [(1, 1.0), (2, 0.5), (3, 0.125)]  # MLflow's names: '.' for '/'
    assert history("eval.genselect") == [(0, 0.5)] and history("eval.by_size") == []
    # one metric's name is the other's prefix: the file store keeps both
    assert history("train.verifier.parse_failures") == [(1, 2.0)]
    assert history("train.verifier.parse_failures.no_judgment") == [(1, 1.0)]
    run = client.get_run(run_id)
    assert run.data.params["learner.lr"] == "0.0003" and run.info.run_name == "first-try"
    assert run.info.status == "FINISHED"
    assert [r.info.run_id for r in client.search_runs([run.info.experiment_id])] == [run_id]  # one run, continued

    fresh = open_trackers(cfg, run_dir, resume=False)  # resume=never in the same folder: a new run
    assert fresh[0].run_id != run_id and read_run_ids(run_dir)["mlflow"] == fresh[0].run_id
    fresh[0].close()


def test_an_unknown_backend_or_a_missing_package_is_a_config_error(monkeypatch):
    import importlib.util

    from core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"logging.backends=.*'neptune', which is not one of"):
        load_config("default", ["logging.backends=[tensorboard,neptune]"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match="the wandb package is not installed"):
        load_config("default", ["logging.backends=[wandb]"])


def test_a_backend_that_cannot_start_its_run_stops_the_run_naming_it(tmp_path, monkeypatch):
    import driver.trackers
    from driver.failure import RunFailed

    class NoLogin:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("api_key not configured (no-tty)\nmore detail")

    monkeypatch.setitem(driver.trackers.REMOTE_TRACKERS, "wandb", NoLogin)
    with pytest.raises(RunFailed, match=r"wandb could not start its run \(RuntimeError: api_key not configured "
                                        r"\(no-tty\)\); check the logging\.\* keys"):
        open_trackers(_config(tmp_path / "run", "wandb"), tmp_path / "run", resume=False)


def test_a_backend_that_fails_mid_run_is_dropped_with_a_warning_and_the_run_goes_on(tmp_path, caplog):
    class Flaky:
        def __init__(self):
            self.steps = []

        def log(self, step, values):
            if step == 2:
                raise OSError("disk full")
            self.steps.append(step)

        def close(self, failed=False):
            pass

    flaky = Flaky()
    log = MetricsLog(tmp_path, tensorboard=False, trackers=[flaky])
    for step in (1, 2, 3):
        log.log(step, "train", {"loss": 1.0 / step})
    assert flaky.steps == [1] and log.trackers == []
    assert [r["step"] for r in log.records()] == [1, 2, 3]
    assert "Flaky failed at step 2 and gets no more metrics (OSError: disk full)" in caplog.text
