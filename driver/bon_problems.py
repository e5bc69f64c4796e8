"""Best-of-N samples from a benchmark file: problems with answers in, scored samples (`driver.bon`'s samples file) out.

    python -m driver.bon --problems FILE --generator MODEL --selector MODEL [--samples-per-problem 16]

The problems file is the project's data file (driver/data/files.py, docs/data.md "User files"; `python -m
driver.convert` writes one from verl Parquet or NeMo-Skills JSONL). Its candidates come from one of two places:

* `--generator MODEL`: k solutions per problem sampled with vLLM (`RolloutWorker.sample_solutions`, the generator
  prompt, as `data.source=model` synthesis samples them, driver/data/generated.py); a problems-only file is enough
  (`id`, `problem`, `answer`), and a file's own candidates are not read. Sampling is resumable: each finished chunk
  of problems is appended to a cache beside the output, named after everything the texts depend on (the
  generator's files, the problems file, k, temperature, token budget, seed), so a repeated or interrupted run
  samples only what is missing;
* no generator: the file's own `candidates`, the same number in every row.

Every candidate is then labelled as the synthesis labels candidates (driver/data/labeling.py): math-verify against
`answer` (the sandbox's tests for code), a row's own `candidate_labels`, or `data.label_function`. A candidate the
verifier could not judge (a timeout or an error) scores 0 and is counted, so every problem keeps all k samples.
The scored samples are written as `driver.bon` reads them (`{id, problem, domain, texts, answers, rewards}` per
problem), and `--samples` of that file measures the same samples again without sampling or labelling.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from driver.data.problem import DataError


def benchmark_settings(path: str, generator: str = "", k: int = 16, temperature: float = 1.0,
                       max_tokens: int = 256, seed: int = 0, label_function: str = ""):
    """The DataConfig that reads `path` as a user file (bad rows stop with `path:line: reason`) and, with a
    `generator` folder, samples `k` solutions per problem from it (`data.source=model` on `data.generator_problems
    =file`)."""
    from core.config import DataConfig

    return DataConfig(source="model" if generator else "file", generator=generator, generator_problems="file",
                      path=str(path), candidates_per_problem=k, generator_temperature=temperature,
                      generator_max_tokens=max_tokens, seed=seed, bad_rows="error",
                      label_function={"name": label_function})


def read_benchmark(cfg) -> list:
    """The problems of `cfg.path` with their own candidates (RawProblems, unlabelled unless the file labels them);
    DataError naming the row when a row has no candidates or not as many as the first row (the estimators
    average over a fixed number of samples per problem)."""
    from driver.data.sources import load_problems

    if not Path(cfg.path).is_file():
        raise DataError(f"--problems {cfg.path}: no such file")
    problems = load_problems(cfg).problems
    if not problems:
        raise DataError(f"{cfg.path}: no rows")
    n = len(problems[0].candidates)
    for p in problems[1:]:
        if len(p.candidates) != n:
            raise DataError(f"{p.origin}: {len(p.candidates)} candidates, the first row has {n} (Best-of-N needs "
                            f"the same number of samples for every problem)")
    return problems


def sampling_cache(samples_path: Path, cfg) -> Path:
    """Where the raw samples of `cfg` are kept chunk by chunk, beside `samples_path`: its name carries a hash of
    what the texts depend on (driver.data.generated.model_source_versions: the generator's and the file's
    identity; k, temperature, token budget, seed; not the labels), so other settings never reuse them."""
    from driver.data.generated import model_source_versions

    what = {"versions": model_source_versions(dataclasses.replace(cfg, label_function={"name": ""})),  # labels later
            "k": cfg.candidates_per_problem,
            "temperature": cfg.generator_temperature, "max_tokens": cfg.generator_max_tokens, "seed": cfg.seed}
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]
    return samples_path.with_name(f"{samples_path.name.removesuffix('.samples.jsonl')}.sampling-{key}.jsonl")


@contextmanager
def local_sampler(engine):
    """A sampler for `driver.data.generated.load_model_samples` on `engine` (a `driver.bon.LocalEngine` of the
    generator: one vLLM engine in this process, no Ray): sampler(problems [(id, text, domain)], n, temperature,
    max_tokens, seed) -> one list of n Rollouts per problem. The engine is left running (its owner closes it)."""
    def sample(problems: list, n: int, temperature: float, max_tokens: int, seed: int) -> list:
        return engine.run(lambda worker: worker.sample_solutions(problems, n, temperature, max_tokens, seed))

    yield sample


def sample_benchmark(cfg, engine, cache_path: Optional[Path], progress: bool = True) -> tuple:
    """(the problems of `cfg.path`, each with `cfg.candidates_per_problem` solutions sampled from `cfg.generator`
    on `engine`, the generator record: folder, sampling settings, throughput).
    `driver.data.generated.load_model_samples` on a `local_sampler`: the generator folder is checked first
    (DataError), and chunks already in `cache_path` are not sampled again (the engine starts only when some are
    missing)."""
    from driver.data.generated import load_model_samples

    result = load_model_samples(cfg, lambda: local_sampler(engine), progress, cache_path)
    return result.problems, result.info["generator"]


def label_benchmark(problems: list, label_function: str = "", sandbox_cfg=None) -> tuple:
    """(the problems with every candidate labelled, LabelStats): `driver.data.labeling.label_problems` with the
    unverified candidates kept at 0.0."""
    from driver.data.labeling import label_problems

    return label_problems(problems, sandbox_cfg=sandbox_cfg, label_function=label_function, keep_unverified=True)


def samples_row(problem) -> dict:
    """A labelled RawProblem as one samples-file row {id, problem, domain, texts, answers, rewards}: math answers
    are the ones the verifier judged (`candidate_answers`), code has none (None each)."""
    answers = list(problem.candidate_answers) if problem.domain == "math" else [None] * len(problem.candidates)
    return {"id": problem.id, "problem": problem.problem, "domain": problem.domain,
            "texts": list(problem.candidates), "answers": answers, "rewards": [float(x) for x in problem.labels]}


def write_samples(problems: list, path: Path) -> Path:
    """The labelled problems as a samples file (`samples_row` per line), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(samples_row(p)) + "\n" for p in problems))
    tmp.replace(path)
    return path


def labels_summary(stats) -> dict:
    """The label counts of a LabelStats (per verifier: correct, wrong, timeout, error), without the examples."""
    record = stats.to_dict()
    record["verifiers"] = {name: {s: tally.get(s, 0) for s in ("correct", "wrong", "timeout", "error")}
                           for name, tally in record["verifiers"].items()}
    return record


__all__ = ["benchmark_settings", "read_benchmark", "sampling_cache", "local_sampler", "sample_benchmark",
           "label_benchmark", "samples_row", "write_samples", "labels_summary"]
