"""Labels that come from the user instead of the built-in verifiers: a file's `candidate_labels` column and a label
function (the `data.label_function` section, core/label_functions.py; its interface in core/user_functions.py).

* `record_file_labels`: the labels a file gives are kept as they are and counted under the verifier
  "candidate_labels" (correct = 1.0, anything lower wrong), so `driver.synth` accounts for them beside the others.
* `label_with_function`: each candidate's label from the user's function, called in worker processes
  (`sandbox.workers.ProcessPool`, no memory cap) under a deadline of `TIMEOUT_S`: a call that hangs is a "timeout",
  one that raises or returns something other than a bool or a number in [0, 1] (None included) an "error"; either
  leaves the candidate unlabelled (counted, with examples, under "label_function"), as a verifier's would.
* `check_rewardable`: training tasks without a reference (rows labelled by the file or the function alone) need
  a reward function (`verifier.reward.name`) to be scored; refused before any actor starts otherwise.
"""
from __future__ import annotations

import inspect
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from core.plugins import call_by_path, load_cached
from core.user_functions import LABEL_FUNCTION, as_score
from driver.data.problem import DataError
from driver.data.verify import LabelStats
from sandbox.workers import OK, ProcessPool

FILE_LABELS, LABEL_FN = "candidate_labels", "label_function"
TIMEOUT_S = 60.0  # deadline of one label-function call (a judge model may take a while)


def record_file_labels(problems: list, stats: LabelStats) -> None:
    """Count the labels that `problems` (RawProblems with labels from their file) bring, per candidate."""
    for p in problems:
        stats.checked += len(p.labels)
        stats.unique_pairs += len(p.labels)
        for i, label in enumerate(p.labels):
            stats.record(FILE_LABELS, "correct" if label >= 1.0 else "wrong", f"{p.id}#{i}: {label:g} ({p.origin})")


def label_function_identity(path: str) -> str:
    """What a dataset labelled by the function at `path` depends on (its hash): the path, and the size and time of
    the file that defines the function, so an edited function builds a new dataset."""
    fn = LABEL_FUNCTION.load(path)
    try:
        source = Path(inspect.getsourcefile(inspect.unwrap(fn)) or "")
        stat = source.stat()
        return f"{path}:{source}:{stat.st_size}:{int(stat.st_mtime)}"
    except (TypeError, OSError):
        return path


def label_with_function(problems: list, path: str, processes: int = 2, stats: LabelStats | None = None,
                        timeout_s: float = TIMEOUT_S, params: dict | None = None) -> list:
    """Labels of every candidate of `problems`, in order (problem by problem): the function's score, or None for a
    call that timed out or failed (counted under "label_function" in `stats`, with the reason). `params`: keyword
    arguments every call gets (the `data.label_function` section's other keys)."""
    stats = stats if stats is not None else LabelStats()
    calls = [(p, i) for p in problems for i in range(len(p.candidates))]
    stats.checked += len(calls)
    stats.unique_pairs += len(calls)
    if not calls:
        return []
    params = dict(params or {})
    LABEL_FUNCTION.load(path, tuple(params))  # PluginError naming data.label_function.name, before any worker starts
    search = tuple(sys.path)
    pool = ProcessPool(max(1, min(processes, len(calls))), preload=["core.plugins"], memory_mb=None,
                       warmup=partial(load_cached, path, LABEL_FUNCTION.key, len(LABEL_FUNCTION.positional), search))
    try:
        def one(call) -> tuple:
            p, i = call
            args = (p.problem, p.candidates[i], p.reference)
            extras = {"candidate_answer": p.candidate_answers[i], "index": i, "domain": p.domain,
                      "problem_id": p.id, "entry_point": p.entry_point}
            out = pool.run(call_by_path, (path, LABEL_FUNCTION.key, len(args), args, extras, search, params),
                           timeout_s)
            if out.status != OK:
                return None, out.status, str(out.value)
            try:
                return as_score(out.value), OK, ""
            except ValueError as err:
                return None, "error", str(err)

        with ThreadPoolExecutor(max(1, processes)) as threads:
            results = list(threads.map(one, calls))
    finally:
        pool.close()
    labels = []
    for (p, i), (label, status, detail) in zip(calls, results):
        name = f"{p.id}#{i}"
        if label is None:
            stats.record(LABEL_FN, status, f"{name}: {detail[:120]}")
        else:
            stats.record(LABEL_FN, "correct" if label >= 1.0 else "wrong", f"{name}: {label:g}")
        labels.append(label)
    return labels


def check_rewardable(tasks: list, reward_function: str) -> None:
    """DataError (one line) when a training task has no reference answer (or tests) to verify a selection against
    and no reward function (`verifier.reward.name`) scores it instead."""
    if reward_function:
        return
    bare = [t for t in tasks if not str(t.reference).strip()]
    if bare:
        raise DataError(f"{len(bare)} training prompts (e.g. {bare[0].prompt_id}) have no reference answer or tests: "
                        f"their labels came from the file or data.label_function, and the built-in verifiers have "
                        f"nothing to check a selection against; set verifier.reward.name (e.g. "
                        f"stored_label, the dataset's label of the named candidate)")


__all__ = ["record_file_labels", "label_with_function", "label_function_identity", "check_rewardable", "FILE_LABELS",
           "LABEL_FN", "TIMEOUT_S"]
