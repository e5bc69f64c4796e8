"""What a weight sync costs while long responses are in flight: `rollout.sync_mode` 'drain' against 'keep'.

One RolloutWorker (vLLM's CPU engine, in process) holding the tiny Qwen3 of the default; per trial, `--prompts`
requests of n = `--samples` responses of exactly `--tokens` tokens each (ignore_eos) are started, and
`--after` seconds later a weight update (the same weights, a new version, through
`update_weights_from_object_store`) is made. Reported per mode: the sync's wait for the requests in flight
(`drain_s`: in 'drain' until they finish, in 'keep' until the engine has frozen them), the whole sync, and when the
last response finished (from the requests' start). 'drain' and 'keep' trials alternate. Results appended to
--out (default benchmarks/results/sync_mode.jsonl).

    python benchmarks/sync_mode.py --tokens 512 --trials 5
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


async def trial(worker, state: dict, version: int, prompt: list, args) -> dict:
    """One update while `args.prompts` requests run: its stats and when the last response ended."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(n=args.samples, temperature=1.0, max_tokens=args.tokens, ignore_eos=True, logprobs=0,
                            output_kind=RequestOutputKind.FINAL_ONLY)
    start = time.perf_counter()
    running = [asyncio.ensure_future(worker.run_request(prompt, params)) for _ in range(args.prompts)]
    await asyncio.sleep(args.after)
    stats = await worker.update_weights_from_object_store(state, version)
    synced = time.perf_counter()
    outputs = await asyncio.gather(*running)
    end = time.perf_counter()
    assert all(len(c.token_ids) == args.tokens for out, *_ in outputs for c in out.outputs)
    return {"drain_s": stats["drain_s"], "sync_s": synced - start - args.after, "load_s": stats["load_s"],
            "generation_s": end - start}


def summary(values: list) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values)}


async def main_async(args) -> dict:
    import dataclasses

    from transformers import AutoModelForCausalLM

    from actors.rollout.rollout_worker import RolloutWorker
    from core.config import RolloutConfig
    from tiny_recipe.config import TinyModelConfig
    from tiny_recipe.model import build_tiny_model

    texts = [f"Problem: what is {a} + {b}? Solution: {a + b}. Judgment: {a % 4}" for a in range(40) for b in range(10)]
    path = str(build_tiny_model(TinyModelConfig(), texts, Path(tempfile.mkdtemp()) / "tiny", seed=0))
    state = {k: v.detach().numpy().copy() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()
             if k != "lm_head.weight"}
    cfg = RolloutConfig(samples_per_prompt=args.samples, max_response_tokens=args.tokens, constrain_index=False,
                        max_num_seqs=max(8, args.prompts * args.samples))
    worker = RolloutWorker(cfg, path)
    prompt = worker.encode_prompt("Problem: what is 3 + 4? Solution 0: 3 + 4 = 7. Solution 1: 3 + 4 = 8.")
    rows = {"drain": [], "keep": []}
    try:
        await trial(worker, state, 1, prompt, args)  # warm-up (first update, first long batch)
        version = 1
        for k in range(args.trials):
            for mode in ("drain", "keep") if k % 2 == 0 else ("keep", "drain"):
                worker.cfg = dataclasses.replace(cfg, sync_mode=mode)
                version += 1
                rows[mode].append(await trial(worker, state, version, prompt, args))
    finally:
        await worker.shutdown()
    return {"tokens": args.tokens, "prompts": args.prompts, "samples": args.samples, "after_s": args.after,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "loadavg": os.getloadavg(),
            **{mode: {key: summary([r[key] for r in rs]) for key in rs[0]} for mode, rs in rows.items()}}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=512, help="length of every response")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--samples", type=int, default=4, help="responses per request (n)")
    p.add_argument("--after", type=float, default=0.5, help="seconds between the requests' start and the sync")
    p.add_argument("--trials", type=int, default=5, help="trials per mode (alternating)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sync_mode.jsonl"))
    args = p.parse_args(argv)
    from core.env import apply_defaults

    apply_defaults()
    result = asyncio.run(main_async(args))
    print(json.dumps(result))
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()
