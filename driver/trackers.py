"""The metric backends beside metrics.jsonl (`logging.backends`): TensorBoard, Weights & Biases, MLflow.

`driver.report.MetricsLog` hands each one every finite scalar of a record as `KIND/KEY` with the record's step
(`log`; MLflow stores the names with '.' for '/', `mlflow_key`), and `close`s them at the end. W&B and MLflow also get the resolved config once, flattened to dotted keys,
when their run is created. Their run ids are kept in `run_dir/trackers.json`, so a resumed run (`resume=`) continues
the same W&B and MLflow run; a new run in the same folder (`resume=never`, or no checkpoint yet) starts new ones.

Their console output must not reach the console (the progress bar, evaluations and the summary live there): W&B
runs silent and does not capture the console; their Python logs go where the driver's go (`run_dir/train.log`,
warnings and worse on the console too), and what they print or warn while called here goes to train.log as well.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import re
import warnings
from pathlib import Path
from typing import Optional

log = logging.getLogger("genselect.trackers")
RUN_IDS = "trackers.json"


def scalars(values: dict) -> dict:
    """The finite int and float values of a record (bools as 0/1); lists, dicts, strings and NaN are left out."""
    return {k: float(v) for k, v in values.items()
            if isinstance(v, (int, float)) and math.isfinite(v)}


def flat_config(cfg) -> dict:
    """The resolved config as {dotted key: value} (a list stays one value)."""
    from omegaconf import OmegaConf

    from core.config import to_yaml
    from driver.checkpoint import flatten

    return flatten(OmegaConf.to_container(OmegaConf.create(to_yaml(cfg))))


class _LogStream(io.TextIOBase):
    """A text stream whose lines go to the trackers' logger at INFO (train.log)."""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                log.info("%s", line.rstrip())
        return len(text)


@contextlib.contextmanager
def to_run_log():
    """What a backend prints or warns inside this block goes to train.log instead of the console."""
    stream = _LogStream()
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, category, *_args, **_kw: log.info("%s: %s", category.__name__,
                                                                                 message)
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            yield


def read_run_ids(run_dir: str | Path) -> dict:
    """{backend: run id} of `run_dir/trackers.json`; {} when there is none."""
    path = Path(run_dir) / RUN_IDS
    return json.loads(path.read_text()) if path.is_file() else {}


def write_run_ids(run_dir: str | Path, ids: dict) -> None:
    """Record the backends' run ids (replaced atomically)."""
    path = Path(run_dir) / RUN_IDS
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(ids, indent=1))
    os.replace(tmp, path)


class TensorBoardTracker:
    """run_dir/tensorboard/: one scalar per `KIND/KEY`, flushed after every record."""

    def __init__(self, run_dir: str | Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    def log(self, step: int, values: dict) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self, failed: bool = False) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run (`logging.project`, `logging.run_name`, `logging.wandb_mode`), its files under run_dir/wandb/
    (or $WANDB_DIR). `run_id`: continue that run; None: a new one, with `config` as its config."""

    def __init__(self, run_dir: str | Path, settings, name: str, config: dict, run_id: Optional[str] = None):
        import wandb

        with to_run_log():
            self.run = wandb.init(
                project=settings.project, name=name, id=run_id, resume="allow" if run_id else None,
                config=None if run_id else config, dir=os.environ.get("WANDB_DIR") or str(run_dir),
                mode=settings.wandb_mode or None, settings=wandb.Settings(silent=True, console="off"))
        self.run_id = self.run.id

    def log(self, step: int, values: dict) -> None:
        with to_run_log():
            self.run.log(values, step=step)

    def close(self, failed: bool = False) -> None:
        with to_run_log():
            self.run.finish(exit_code=1 if failed else 0)


_MLFLOW_BATCH = 1000  # MLflow's most metrics (and, below, params) in one log_batch call
_MLFLOW_PARAMS = 100
_MLFLOW_NAME = re.compile(r"[^0-9A-Za-z_\-. /:]")


def mlflow_key(key: str) -> str:
    """A metric or param name MLflow accepts and can store: characters outside [A-Za-z0-9_-. /:] become '_', and '/'
    becomes '.' (the file store keeps a name's '/' parts as folders, and one metric's name can be the folder of
    others: verifier/parse_failures and verifier/parse_failures/no_judgment)."""
    return _MLFLOW_NAME.sub("_", key).replace("/", ".")


def mlflow_uri(run_dir: str | Path, uri: str) -> str:
    """`logging.mlflow_tracking_uri`, or a file store in run_dir/mlruns when it is ''; a local folder becomes a
    file: URI. MLflow's file store is in maintenance mode and refuses to open unless MLFLOW_ALLOW_FILE_STORE is
    set: for a local store it is set here (a server's URI needs nothing)."""
    if not uri or "://" not in uri and not uri.startswith("file:"):
        uri = Path(uri or Path(run_dir) / "mlruns").resolve().as_uri()
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


class MlflowTracker:
    """An MLflow run in experiment `logging.project` at `mlflow_uri`. `run_id`: continue that run (marked running
    again); None: a new one, the flattened config as its params."""

    def __init__(self, run_dir: str | Path, settings, name: str, config: dict, run_id: Optional[str] = None):
        from mlflow.tracking import MlflowClient

        with to_run_log():
            self.client = MlflowClient(tracking_uri=mlflow_uri(run_dir, settings.mlflow_tracking_uri))
            if run_id:
                self.client.update_run(run_id, status="RUNNING")
            else:
                run_id = self.client.create_run(self._experiment(settings.project), run_name=name).info.run_id
                self._log_params(run_id, config)
        self.run_id = run_id

    def _experiment(self, name: str) -> str:
        experiment = self.client.get_experiment_by_name(name)
        return experiment.experiment_id if experiment else self.client.create_experiment(name)

    def _log_params(self, run_id: str, config: dict) -> None:
        from mlflow.entities import Param

        params = [Param(mlflow_key(k), str(v)) for k, v in config.items()]
        for i in range(0, len(params), _MLFLOW_PARAMS):
            self.client.log_batch(run_id, params=params[i:i + _MLFLOW_PARAMS])

    def log(self, step: int, values: dict) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(k), v, now, step) for k, v in values.items()]
        with to_run_log():
            for i in range(0, len(metrics), _MLFLOW_BATCH):
                self.client.log_batch(self.run_id, metrics=metrics[i:i + _MLFLOW_BATCH])

    def close(self, failed: bool = False) -> None:
        with to_run_log():
            self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


REMOTE_TRACKERS = {"wandb": WandbTracker, "mlflow": MlflowTracker}


def _open(backend: str, run_dir, settings, name: str, config: Optional[dict], run_id: Optional[str]):
    """The tracker of `backend`; RunFailed, naming the backend and what it said, when it cannot start its run (no
    W&B login online, an MLflow server out of reach)."""
    from driver.failure import RunFailed

    try:
        return REMOTE_TRACKERS[backend](run_dir, settings, name, config, run_id=run_id)
    except Exception as err:
        said = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
        raise RunFailed(f"logging.backends: {backend} could not start its run ({type(err).__name__}: {said}); "
                        f"check the logging.* keys (offline W&B: logging.wandb_mode=offline)") from err


def open_trackers(cfg, run_dir: str | Path, resume: bool) -> list:
    """The backends of `cfg.logging.backends`, TensorBoard first. With `resume`, W&B and MLflow continue the runs
    named in run_dir/trackers.json (a backend without one starts a new run); else they start new runs, whose ids
    replace the file's."""
    backends = cfg.logging.backends
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    trackers = [TensorBoardTracker(run_dir)] if "tensorboard" in backends else []
    ids = read_run_ids(run_dir) if resume else {}
    name = cfg.logging.run_name or Path(run_dir).resolve().name
    config = None
    for backend in (b for b in backends if b in REMOTE_TRACKERS):
        run_id = ids.get(backend)
        if run_id is None and config is None:
            config = flat_config(cfg)
        tracker = _open(backend, run_dir, cfg.logging, name, config, run_id)
        ids[backend] = tracker.run_id
        trackers.append(tracker)
        log.info("%s run %s (%s)", backend, tracker.run_id, "continued" if run_id else "new")
    if any(b in REMOTE_TRACKERS for b in backends):
        write_run_ids(run_dir, ids)
    return trackers
