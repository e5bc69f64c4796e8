"""Weight-sync speed: learner -> Ray object store -> rollout actor -> /dev/shm buckets -> vLLM engine (CPU).

For the tiny selector and for a larger random Qwen3 shape, run several full syncs through
`WeightSyncBroadcaster` (object_store backend) to one RolloutWorker Ray actor, with a learner actor that
perturbs its weights before each export (so every sync moves new values), and report median / p90 of the
whole sync and of its parts. Results: benchmarks/results/weight_sync.json.

    python benchmarks/weight_sync.py [--syncs 5] [--large-layers 4]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


class BenchLearner:
    """Learner stand-in: a transformers model; export_weights() = full HF state dict as numpy."""

    def __init__(self, model_path: str):
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)

    def export_weights(self, rank0_only: bool = False, widen: bool = True) -> dict:
        import torch

        with torch.no_grad():
            for p in self.model.parameters():
                p.mul_(1.0001)
        return {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()}


def build_models(out: Path, large_layers: int) -> dict:
    """{"tiny": path, "large": path}: the tiny selector, and a random Qwen3 of a larger shape."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from tiny_recipe.config import TinyModelConfig
    from tiny_recipe.model import build_tiny_model

    texts = [f"Problem: what is {a} + {b}? Solution: {a + b}. Judgment: {a % 4}"
             for a in range(40) for b in range(10)]
    tiny = build_tiny_model(TinyModelConfig(), texts, out / "tiny", seed=0)
    large = out / f"large{large_layers}"
    if not (large / "config.json").exists():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tiny)
        config = Qwen3Config(vocab_size=16384, hidden_size=1024, intermediate_size=3072,
                             num_hidden_layers=large_layers, num_attention_heads=16, num_key_value_heads=8,
                             head_dim=64, max_position_embeddings=2048, tie_word_embeddings=True,
                             eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
        torch.manual_seed(0)
        Qwen3ForCausalLM(config).save_pretrained(large, safe_serialization=True)
        tokenizer.save_pretrained(large)
    return {"tiny": str(tiny), "large": str(large)}


def machine() -> dict:
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1), "python": platform.python_version(),
            "platform": platform.platform(), "load_avg_at_start": os.getloadavg()}


def summarize(values: list) -> dict:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"median": statistics.median(ordered), "p90": p90, "min": ordered[0], "max": ordered[-1]}


def bench_model(ray, name: str, path: str, syncs: int) -> dict:
    from actors.rollout.rollout_worker import RolloutWorker
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import RolloutConfig, WeightSyncConfig

    learner = ray.remote(num_cpus=0)(BenchLearner).remote(path)
    start = time.perf_counter()
    rollout = ray.remote(num_cpus=0)(RolloutWorker).remote(RolloutConfig(max_num_seqs=8), path, "float32", 0, 0)
    ray.get(rollout.health.remote(), timeout=900)
    engine_start = time.perf_counter() - start
    try:
        broadcaster = WeightSyncBroadcaster(WeightSyncConfig(timeout_s=600), learner, [rollout])
        runs = [broadcaster.sync(v) for v in range(1, syncs + 1)]
    finally:
        ray.get(rollout.shutdown.remote(), timeout=120)
        ray.kill(rollout)
        ray.kill(learner)
    worker = [r["workers"][0] for r in runs]
    return {
        "model": name, "bytes": runs[0]["bytes"], "tensors": worker[0]["tensors"], "buckets": worker[0]["buckets"],
        "syncs": syncs, "engine_start_s": engine_start,
        "seconds": summarize([r["seconds"] for r in runs]), "gbps": summarize([r["gbps"] for r in runs]),
        "export_seconds": summarize([r["export_seconds"] for r in runs]),
        "engine_update_seconds": summarize([w["seconds"] for w in worker]),
        "file_write_seconds": summarize([w["write_s"] for w in worker]),
        "vllm_load_seconds": summarize([w["engine_load_s"] for w in worker]),
        "raw_seconds": [r["seconds"] for r in runs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--large-layers", type=int, default=4, help="layers of the larger shape (4: ~270 MB fp32)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "weight_sync.json"))
    args = parser.parse_args()

    from core.env import apply_defaults

    apply_defaults()
    import ray

    models = build_models(REPO / ".cache" / "bench_models", args.large_layers)
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=2 << 30,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        results = [bench_model(ray, name, path, args.syncs) for name, path in models.items()]
    finally:
        ray.shutdown()
    report = {"benchmark": "weight_sync", "backend": "object_store", "dtype": "float32",
              "bucket_mb": 256, "machine": machine(), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for r in results:
        print(f"{r['model']}: {r['bytes'] / 1e6:.1f} MB, sync median {r['seconds']['median']:.3f} s "
              f"(p90 {r['seconds']['p90']:.3f}), {r['gbps']['median']:.3f} GB/s; export "
              f"{r['export_seconds']['median']:.3f} s, engine update {r['engine_update_seconds']['median']:.3f} s "
              f"(file write {r['file_write_seconds']['median']:.3f} s, vLLM load {r['vllm_load_seconds']['median']:.3f} s)")


if __name__ == "__main__":
    main()
