"""Fixtures for the rollout / weight-sync tests: a tiny Qwen3 built locally, an event loop in a thread,
transformers reference log-probs, and process / shared-memory snapshots for leak checks.

The model builder (tiny_recipe/model.py) belongs to another module and is used as it is.
"""
from __future__ import annotations

import asyncio
import os
import random
import threading

import pytest

from core.records import SelectionTask


def arithmetic_texts(n: int = 300, seed: int = 0) -> list:
    """Lines of GenSelect-flavoured arithmetic text to train the tiny tokenizer on."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        lines.append(f"Problem: what is {a} + {b}?\nSolution {i % 4}: {a} + {b} = {a + b + rng.choice([0, 0, 1])}."
                     f"\nJudgment: {i % 4}")
    return lines


def make_task(i: int, words: int = 1) -> SelectionTask:
    """A small SelectionTask whose prompt has about 20 * `words` tokens."""
    a, b = 17 * i + 3, 5 * i + 11
    candidates = (f"{a} + {b} = {a + b}", f"{a} + {b} = {a + b + 1}")
    body = "\n".join(f"Solution {k}: {c}" for k, c in enumerate(candidates))
    prompt = (f"Problem: what is {a} + {b}?\n" * words) + body + "\nWhich solution is correct?"
    return SelectionTask(prompt_id=f"q{i}/p0", problem_id=f"q{i}", domain="math", problem=f"{a} + {b}",
                         candidates=candidates, candidate_answers=(str(a + b), str(a + b + 1)),
                         labels=(1.0, 0.0), reference=str(a + b), prompt=prompt)


@pytest.fixture(scope="session")
def rollout_model_path(tmp_path_factory):
    """A tiny Qwen3 (tied embeddings, fp32) saved as a Hugging Face folder."""
    from tiny_recipe.config import TinyModelConfig
    from tiny_recipe.model import build_tiny_model

    return str(build_tiny_model(TinyModelConfig(), arithmetic_texts(), tmp_path_factory.mktemp("rollout") / "tiny",
                                seed=0))


class LoopThread:
    """One asyncio loop in a daemon thread: the engine's output handler lives on one loop for the
    whole module, as it would in an async Ray actor. `run(coro)` blocks; `submit(coro)` returns a future."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro, timeout: float = 300):
        return self.submit(coro).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def loop_thread():
    runner = LoopThread()
    yield runner
    runner.close()


def hf_model(path: str):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def hf_logprobs(model, prompt_ids: list, response_ids: list) -> list:
    """Temperature-1 log-probs transformers gives each response token after the prompt (float64)."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(response_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    start = len(prompt_ids)
    return [logp[start + i - 1, t].item() for i, t in enumerate(response_ids)]


def perturbed_state(model, seed: int, scale: float = 0.02) -> dict:
    """Add N(0, scale^2) noise to every parameter in place; return the HF state dict as numpy arrays."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def engine_processes(before: set) -> list:
    """Descendant processes of this one that did not exist in `before` (pids), except Python's
    multiprocessing resource tracker (one per parent process, lives until the parent exits)."""
    import psutil

    procs = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in before and "resource_tracker" not in " ".join(p.cmdline()):
                procs.append(p)
        except psutil.NoSuchProcess:
            continue
    return procs


def shm_paths_of(processes: list) -> set:
    """/dev/shm files mapped or open by `processes`."""
    import psutil

    paths = set()
    for proc in processes:
        try:
            paths.update(m.path for m in proc.memory_maps() if m.path.startswith("/dev/shm/"))
            paths.update(f.path for f in proc.open_files() if f.path.startswith("/dev/shm/"))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return paths


def child_pids() -> set:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def shm_listing() -> set:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.fixture(scope="session")
def rh():
    """Rollout-test helpers (a namespace, so test modules need not import this conftest)."""
    from types import SimpleNamespace

    return SimpleNamespace(make_task=make_task, hf_model=hf_model, hf_logprobs=hf_logprobs,
                           perturbed_state=perturbed_state, engine_processes=engine_processes,
                           shm_paths_of=shm_paths_of, child_pids=child_pids, shm_listing=shm_listing,
                           LoopThread=LoopThread)


def tiny_texts() -> list:
    return [f"Problem {i}: {i} + {3 * i} = ? Solution {i % 4}: {4 * i}. Judgment: {i % 4}" for i in range(300)]


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """The tiny Qwen3 (tied embeddings) the learner and packing tests share, built once per session."""
    from tiny_recipe.config import TinyModelConfig
    from tiny_recipe.model import build_tiny_model

    path = tmp_path_factory.getbasetemp() / "tiny-learner-model"
    build_tiny_model(TinyModelConfig(), tiny_texts(), path, seed=0)
    return path
