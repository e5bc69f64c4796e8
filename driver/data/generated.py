"""Model-sampled candidates (`data.source=model`): the GenSelect paper's synthesis (arXiv 2602.02143, section 3).

A generator model (a local Hugging Face folder, `data.generator`) writes K = `data.candidates_per_problem`
solutions to each problem of `data.generator_problems` (whose own candidates are not used) on the rollout
actors (`actors/rollout/rollout_worker.py` `RolloutWorker.sample_solutions`, vLLM, `rollout.num_workers` engines in
parallel); the result is a `SourceResult` like any other source's, so labelling (math-verify; the sandbox for code,
pass fraction kept), filtering, prompts, budget and manifest are the same stages (driver/data/pipeline.py).

Checked before anything starts (`check_model_source`, a `DataError` with one line): the folder is a model
folder (config.json with a model_type, a tokenizer, weights) and K >= 2. The manifest's `generator` section
records the folder and its identity, the sampling settings, throughput, truncation and the pass rates
(`pass_rates`: pass@k with the unbiased estimator, core/algo/passk.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from driver.data import sources
from driver.data.problem import DataError, RawProblem

CHUNK = 16  # problems per sampling call (one request of K samples each)

#: a sampler: sampler(problems [(id, text, domain)], n, temperature, max_tokens, seed) -> one list of n
#: Rollouts per problem (`RaySampler`; tests pass a fake)


def check_generator_folder(path: str) -> Path:
    """The generator folder, resolved; DataError (one line, naming `data.generator`) unless it is a local Hugging
    Face model folder: config.json naming a model_type, weights and a tokenizer (the same check as a
    `model.name` folder, driver/models/registry.py)."""
    from driver.models.registry import ModelFolderError, validate_hf_folder

    if not path:
        raise DataError("data.generator is empty: data.source=model needs a local model folder")
    if not Path(path).expanduser().exists():
        raise DataError(f"data.generator={path}: no such folder")
    try:
        folder = validate_hf_folder(path)
    except ModelFolderError as err:
        raise DataError(f"data.generator={path}: not a model folder ({err})") from None
    try:
        model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError) as err:
        raise DataError(f"data.generator={path}: not a model folder (config.json unreadable: "
                        f"{type(err).__name__})") from None
    if not model_type:
        raise DataError(f"data.generator={path}: not a model folder (config.json names no model_type)")
    return folder


def check_model_source(cfg) -> Path:
    """Everything about `data.source=model` that can be refused before any actor starts (DataError)."""
    if cfg.candidates_per_problem < 2:
        raise DataError(f"data.candidates_per_problem={cfg.candidates_per_problem}: K, the solutions sampled per "
                        f"problem, must be >= 2")
    if cfg.generator_problems == "model":
        raise DataError("data.generator_problems=model: name the source of the problems (procedural_math, "
                        "reasoning_gym, humaneval or file)")
    return check_generator_folder(cfg.generator)


def generator_identity(path: str) -> str:
    """What the sampled candidates depend on in the folder (dataset hash): its path and every file's size and
    modification time, hashed."""
    folder = check_generator_folder(path)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    blob = json.dumps([[str(p.relative_to(folder)), p.stat().st_size, int(p.stat().st_mtime)] for p in files])
    return f"{folder}:{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def model_source_versions(cfg) -> dict:
    """`sources.source_versions` of a `data.source=model` config, with which generator sampled the candidates."""
    return {**sources.source_versions(cfg), "generator": generator_identity(cfg.generator)}


def load_model_source(cfg, sampler_factory: Optional[Callable], progress: bool = True,
                      cache_path: Optional[Path] = None) -> "sources.SourceResult":
    """The `model` source: `load_model_samples`, with the sampler the caller must give (e.g. `RaySampler`)."""
    if sampler_factory is None:
        raise ValueError("data.source=model needs a sampler_factory (driver.data.generated.RaySampler)")
    return load_model_samples(cfg, sampler_factory, progress, cache_path)


# ------------------------------------------------------------------------------------------ candidates
def code_program(problem: RawProblem, text: str) -> str:
    """The program a code candidate is judged as (`actors.verifier.solutions.code_program`: a ```python block defining
    the entry point, else a completion of the prompt)."""
    from actors.verifier.solutions import code_program as program

    return program(problem.problem, problem.entry_point, text)


def with_samples(problem: RawProblem, texts: list) -> RawProblem:
    """`problem` with the generator's texts as its candidates (math: the final answer extracted as files do)."""
    from driver.data.verify import extract_answer

    if problem.domain == "code":
        programs = tuple(code_program(problem, t) for t in texts)
        return dataclasses.replace(problem, candidates=programs, candidate_answers=programs, labels=None)
    return dataclasses.replace(problem, candidates=tuple(texts),
                               candidate_answers=tuple(extract_answer(t) for t in texts), labels=None)


def load_model_samples(cfg, sampler_factory: Callable, progress: bool = True, cache_path: Optional[Path] = None):
    """The `model` source: the problems of `cfg.generator_problems`, each with K sampled candidates; returns a
    `SourceResult` whose `info` is the manifest's generator record (pass rates are added after labelling,
    `pass_rates`).

    `sampler_factory()`: a context manager giving the sampler (e.g. `RaySampler`), entered only when there is
    something left to sample. Resumable: with `cache_path`, every finished chunk of `CHUNK` problems is
    appended there as one JSON line, and a rerun with the same cache (the pipeline names it after the dataset
    hash, which covers the generator and the sampling settings) samples only the chunks that are missing;
    each chunk keeps its seed (`cfg.seed * 1_000_003 + its start`), so the texts are the ones an
    uninterrupted run samples (up to the engine's numerics)."""
    folder = check_model_source(cfg)
    base = sources.load_problems(dataclasses.replace(cfg, source=cfg.generator_problems), problems_only=True)
    problems = base.problems
    k = cfg.candidates_per_problem
    done = _read_chunks(cache_path, problems, k)
    todo = [start for start in range(0, len(problems), CHUNK) if start not in done]
    started, sampled_tokens = time.time(), 0
    if todo:
        bar = _bar(len(problems), progress)
        bar.update(sum(len(rows) for rows in done.values()))
        with sampler_factory() as sampler:
            for start in todo:
                chunk = problems[start:start + CHUNK]
                groups = sampler([(p.id, p.problem, p.domain) for p in chunk], k, cfg.generator_temperature,
                                 cfg.generator_max_tokens, cfg.seed * 1_000_003 + start)
                rows = []
                for p, rollouts in zip(chunk, groups):
                    if len(rollouts) != k:
                        raise RuntimeError(f"generator returned {len(rollouts)} samples for problem {p.id}, "
                                           f"asked for {k}")
                    rows.append({"id": p.id, "texts": [r.response_text for r in rollouts],
                                 "truncated": sum(r.truncated for r in rollouts),
                                 "tokens": sum(r.response_length for r in rollouts)})
                sampled_tokens += sum(r["tokens"] for r in rows)
                done[start] = rows
                _append_chunk(cache_path, start, rows)
                bar.update(len(chunk))
        bar.close()
    seconds = time.time() - started
    rows = [row for start in sorted(done) for row in done[start]]
    samples, fresh = k * len(rows), k * sum(len(done[s]) for s in todo)
    tokens = sum(r["tokens"] for r in rows)
    info = {
        "folder": str(folder),
        "identity": generator_identity(cfg.generator),
        "problems_from": cfg.generator_problems,
        "sampling": {"k": k, "temperature": cfg.generator_temperature, "top_p": 1.0,
                     "max_tokens": cfg.generator_max_tokens, "seed": cfg.seed},
        "samples": samples,
        "resumed_samples": samples - fresh,
        "sampling_seconds": round(seconds, 2),
        "samples_per_s": round(fresh / seconds, 2) if fresh and seconds > 0 else None,
        "tokens_per_s": round(sampled_tokens / seconds, 1) if fresh and seconds > 0 else None,
        "mean_tokens": tokens / samples if samples else 0.0,
        "truncated": sum(r["truncated"] for r in rows),
    }
    return sources.SourceResult([with_samples(p, r["texts"]) for p, r in zip(problems, rows)], base.bad_rows,
                                rows_over_cap=base.rows_over_cap, info={"generator": info})


def _read_chunks(cache_path: Optional[Path], problems: list, k: int) -> dict:
    """start -> rows of the chunks a previous run finished (a line cut short by a crash, or one that does not
    match these problems and K, is ignored: that chunk is sampled again)."""
    done: dict = {}
    if cache_path is None or not Path(cache_path).exists():
        return done
    for line in Path(cache_path).read_text().splitlines():
        try:
            entry = json.loads(line)
            start, rows = int(entry["start"]), entry["rows"]
        except (ValueError, KeyError, TypeError):
            continue
        ids = [p.id for p in problems[start:start + CHUNK]]
        if [r.get("id") for r in rows] == ids and all(len(r.get("texts", ())) == k for r in rows):
            done[start] = rows
    return done


def _append_chunk(cache_path: Optional[Path], start: int, rows: list) -> None:
    if cache_path is None:
        return
    Path(cache_path).parent.mkdir(parents=True, exist_ok=True)
    with open(cache_path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"start": start, "rows": rows}) + "\n")
        f.flush()


def pass_rates(labeled: list, k_max: int) -> dict:
    """The generator's pass rates on the labelled problems (unverified candidates left out, so n can differ
    per problem): mean reward (= pass@1 for binary labels), and pass@k for k = 1, 2, 4, ..., k_max with the
    unbiased estimator (Chen et al. 2021; core.algo.passk) over the problems with n >= k (how many: `problems`),
    and the fraction of problems with at least one correct sample."""
    from core.algo.passk import pass_at_k

    with_samples_ = [p for p in labeled if p.labels]
    out = {"problems": len(with_samples_), "mean_reward": 0.0, "solved_at_least_once": 0.0, "pass_at_k": {}}
    if not with_samples_:
        return out
    out["mean_reward"] = sum(sum(p.labels) / len(p.labels) for p in with_samples_) / len(with_samples_)
    out["solved_at_least_once"] = sum(p.num_correct > 0 for p in with_samples_) / len(with_samples_)
    for k in sorted({2 ** i for i in range(k_max.bit_length()) if 2 ** i <= k_max} | {k_max}):
        rows = [pass_at_k(len(p.labels), p.num_correct, k) for p in with_samples_ if len(p.labels) >= k]
        if rows:
            out["pass_at_k"][str(k)] = {"value": sum(rows) / len(rows), "problems": len(rows)}
    return out


def _bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="sample", unit="problem", disable=not enabled, file=sys.stderr, dynamic_ncols=True)


# ------------------------------------------------------------------------------------------ the sampler
class RaySampler:
    """`rollout.num_workers` rollout actors on the generator (a local Ray instance unless one is running);
    chunks go round-robin, all in flight at once (each engine batches its own). Use as a context manager:
    the engines and the Ray instance it started are shut down on exit, errors included."""

    def __init__(self, rollout_cfg, model_path: str, dtype: str = "float32", seed: int = 0,
                 num_cpus: Optional[int] = None):
        self.rollout_cfg, self.model_path, self.dtype, self.seed = rollout_cfg, str(model_path), dtype, seed
        self.num_cpus = num_cpus
        self.handles = None
        self._started_ray = False
        self._next = 0

    def __enter__(self) -> "RaySampler":
        import ray

        from cluster.launch import launch_rollouts
        from core.env import default_env, quiet_local_ray_auth_notice

        if not ray.is_initialized():
            quiet_local_ray_auth_notice()
            ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": default_env()})
            self._started_ray = True
        try:
            self.handles = launch_rollouts(self.rollout_cfg, self.model_path, self.dtype, self.seed, default_env())
            ray.get([h.health.remote() for h in self.handles.rollouts], timeout=1200)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __call__(self, problems: list, n: int, temperature: float, max_tokens: int, seed: int) -> list:
        import ray

        workers = self.handles.rollouts
        parts = [problems[i::len(workers)] for i in range(len(workers))]
        refs = [w.sample_solutions.remote(part, n, temperature, max_tokens, seed + 1_000 * i)
                for i, (w, part) in enumerate(zip(workers, parts)) if part]
        from core.deadlines import generate_deadline_s

        # the generator prompt's token count is at most its characters plus the template's
        prompt_tokens = max((len(p[1]) for p in problems), default=0) + 512
        biggest = max(len(part) for part in parts) * n
        results = ray.get(refs, timeout=generate_deadline_s(self.rollout_cfg, prompt_tokens, biggest, max_tokens) + 60)
        out = [None] * len(problems)
        for i, groups in enumerate(results):
            out[i::len(workers)] = groups
        return out

    def __exit__(self, exc_type, exc, tb) -> None:
        import ray

        from cluster.launch import shutdown

        if self.handles is not None:
            shutdown(self.handles)
            self.handles = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
