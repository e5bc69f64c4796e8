"""What runs on this machine's accelerator, in tiers that skip cleanly (with the reason) when a package or CUDA is
missing. One NVIDIA GPU, no network; about 8 minutes at most. `scripts/device_check.sh` runs it.

    python scripts/device_check.py [--device cuda|cpu] [--out FILE.jsonl] [--tiers a,b,...] [--deadline-s 480]

Tiers, in order (each result a JSON line on stdout and in --out; a table closes the run):
  versions       python, torch (+CUDA, the GPU), transformers, deepspeed, vllm, ray: version or why it does not import
  ipc_roundtrip  two processes: one flattens tensors into buckets and exports one CUDA IPC handle per bucket
                 (actors/weight_sync/ipc_buckets.py), the other opens them on its own device index and checks
                 every byte; the exporter holds the buckets until the receiver says it copied them. On CPU the same
                 exchange runs over the shm channel (bucket files on /dev/shm) in place of CUDA IPC.
  learner_ipc    the real Learner (DeepSpeed ZeRO-3, bf16, one rank) on a random small Qwen3 takes one step, exports
                 its weights by IPC; a receiver process loads them into transformers, and its log-probs must equal
                 the learner's (bf16 bound LOGPROB_TOL_BF16)
  vllm_ipc       (vLLM) a colocated engine (RolloutWorker, gpu_memory_utilization 0.3) loads the learner's IPC
                 buckets through its drain / load / resume path; its log-probs of a fixed completion must equal
                 the learner's weights' within LOGPROB_TOL_BF16
  ray_smoke      (vLLM and Ray) three steps of the smoke config colocated (weight_sync.transport.name=ipc), then one
                 /v1/select from `driver.serve` on its export
A tier that needs what an earlier one found missing (CUDA, a package) is skipped, saying which. With
`--device cpu --cpu-too` the CUDA tiers run on CPU instead (fp32, the IPC buckets as /dev/shm files): the same code
paths without a GPU, to check this script itself.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
TIERS = ("versions", "ipc_roundtrip", "learner_ipc", "vllm_ipc", "ray_smoke")
NEEDS = {"ipc_roundtrip": ("torch",), "learner_ipc": ("cuda", "deepspeed", "transformers"),
         "vllm_ipc": ("cuda", "deepspeed", "transformers", "vllm"),
         "ray_smoke": ("cuda", "deepspeed", "transformers", "vllm", "ray")}
LOGPROB_TOL_BF16 = 5e-2  # bf16 on both sides, different kernels: learner_gpu.py measured 5.4e-3 at most
SMALL_QWEN3 = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, max_position_embeddings=512, tie_word_embeddings=True)


class Report:
    def __init__(self, out: str):
        self.out, self.results, self.have = out, [], {}

    def emit(self, result: dict) -> None:
        self.results.append(result)
        line = json.dumps(result, default=str)
        print(line, flush=True)
        if self.out:
            with open(self.out, "a") as f:
                f.write(line + "\n")

    def table(self) -> str:
        rows = [f"{r['tier']:<14} {r['status']:<8} {r.get('seconds', 0):>7.1f} s  {r.get('note', '')}"[:200]
                for r in self.results]
        return "\n".join(["tier           status   seconds   note", *rows])


# ----------------------------------------------------------------------------- tiers
def versions(device: str) -> dict:
    found, missing = {"python": sys.version.split()[0]}, {}
    for module in ("torch", "transformers", "deepspeed", "vllm", "ray"):
        try:
            found[module] = getattr(importlib.import_module(module), "__version__", "?")
        except Exception as e:  # a broken install raises more than ImportError
            missing[module] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    cuda = False
    if "torch" in found:
        import torch

        cuda = device == "cuda" and torch.cuda.is_available()
        found["torch_cuda"] = torch.version.cuda
        if cuda:
            found["gpu"] = torch.cuda.get_device_name(0)
            found["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    have = {m: m in found for m in ("torch", "transformers", "deepspeed", "vllm", "ray")}
    have["cuda"] = cuda
    note = ", ".join(f"{k} {v}" for k, v in found.items()) + ("; missing: " + ", ".join(missing) if missing else "")
    return {"status": "ok", "found": found, "missing": missing, "have": have, "note": note}


def _roundtrip_receiver(queue, answers) -> None:
    """Second process: open each exported bucket, hash every tensor, say so; returns the digests."""
    import hashlib

    from actors.weight_sync import ipc_buckets as ib

    exported = queue.get(timeout=120)
    digests = {}

    def load(pairs):
        for name, t in pairs:
            digests[name] = hashlib.sha256(t.to("cpu").contiguous().reshape(-1).view(__import__("torch").uint8)
                                           .numpy().tobytes()).hexdigest()

    ib.load_all(exported, 0, load)
    answers.put(digests)


def ipc_roundtrip(device: str) -> dict:
    import hashlib

    import torch
    import torch.multiprocessing as mp

    from actors.weight_sync import ipc_buckets as ib

    gen = torch.Generator().manual_seed(0)
    state = {f"layer{i}.w": torch.randn(64 + i, 32, generator=gen).to(torch.bfloat16 if i % 2 else torch.float32)
             for i in range(6)}
    state = {k: v.to(device) for k, v in state.items()}
    buckets, exported = ib.export(state, 16 << 10, "cuda" if device == "cuda" else "shm")
    ledger = ib.ExportLedger()
    ledger.add("v1", buckets, ["receiver"], free=lambda: device == "cpu" and ib.remove_shm(exported))
    ctx = mp.get_context("spawn")
    queue, answers = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_roundtrip_receiver, args=(queue, answers))
    proc.start()
    queue.put(exported)
    got = answers.get(timeout=180)
    ledger.release("v1", "receiver")
    proc.join(30)
    want = {k: hashlib.sha256(v.to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
            for k, v in state.items()}
    ok = got == want and ledger.held() == {}
    return {"status": "ok" if ok else "fail", "buckets": len(exported), "tensors": len(state),
            "note": f"{len(state)} tensors in {len(exported)} buckets, one handle each, "
                    f"{'every byte equal' if got == want else 'BYTES DIFFER'} in the receiver"
                    + ("" if device == "cuda" else " (the shm channel: /dev/shm files in place of CUDA IPC)")}


def _dtype(device: str) -> str:
    return "bfloat16" if device == "cuda" else "float32"


def _small_learner(folder: Path, device: str):
    """The real Learner (ZeRO-3, bf16 on CUDA, one rank) on a random small Qwen3 saved in `folder`; (learner, Run)."""
    import torch
    from learner_gpu import QUICK, Run, new_learner, save_random_model

    save_random_model(folder, SMALL_QWEN3, _dtype(device), device)
    run = Run(device=torch.device(device), sizes=QUICK, tmp=folder.parent, max_seconds=120.0, nccl_timeout_s=60.0)
    return new_learner(folder, 3, _dtype(device), run), run


def _receiver_logprobs(queue, answers, folder: str, seqs, device: str) -> None:
    """Receiver process: load the IPC weights into transformers (bf16 on cuda:0), answer its log-probs of `seqs`."""
    import torch
    from learner_gpu import reference_logprobs
    from transformers import AutoModelForCausalLM

    from actors.weight_sync import ipc_buckets as ib

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, _dtype(device))).to(device).eval()
    exported = queue.get(timeout=120)
    state = {}
    ib.load_all(exported, 0, lambda pairs: state.update({n: t.clone() for n, t in pairs}))
    model.load_state_dict(state, strict=False)
    answers.put(reference_logprobs(model, seqs, 1.0))


def learner_ipc(device: str) -> dict:
    import torch.multiprocessing as mp
    from learner_gpu import genselect_shaped_batch, own_logprobs

    from core.packing import count_loss_tokens

    with tempfile.TemporaryDirectory() as tmp:
        learner, run = _small_learner(Path(tmp) / "model", device)
        try:
            seqs = genselect_shaped_batch(run.sizes, SMALL_QWEN3["vocab_size"])
            metrics = learner.train_step(seqs, count_loss_tokens(seqs), 1)
            exported = learner.export_ipc("v1", 1 << 20, ["receiver"])
            ctx = mp.get_context("spawn")
            queue, answers = ctx.Queue(), ctx.Queue()
            proc = ctx.Process(target=_receiver_logprobs,
                               args=(queue, answers, str(Path(tmp) / "model"), seqs[:4], device))
            proc.start()
            queue.put(exported)
            theirs = answers.get(timeout=240)
            learner.release_ipc("v1", "receiver")
            proc.join(30)
            ours = own_logprobs(learner, seqs[:4])
            gap = max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x, y))
        finally:
            learner.drop_ipc("v1")  # nothing left after the release; frees the buckets had the receiver failed
            learner.shutdown()
    return {"status": "ok" if gap < LOGPROB_TOL_BF16 else "fail", "max_logprob_gap": gap,
            "loss": metrics.get("loss"), "buckets": len(exported),
            "note": f"ZeRO-3 {_dtype(device)} step, {len(exported)} IPC buckets; receiver's log-probs within "
                    f"{gap:.2e} of the learner's (bound {LOGPROB_TOL_BF16})"}


def vllm_ipc(device: str) -> dict:
    import asyncio

    import torch
    from learner_gpu import reference_logprobs
    from transformers import AutoModelForCausalLM

    from core.packing import count_loss_tokens
    from actors.rollout.rollout_worker import RolloutWorker
    from core.config import RolloutConfig
    from core.records import TrainSequence

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        learner, run = _small_learner(folder, device)
        _tokenizer_for(folder)
        cfg = RolloutConfig(samples_per_prompt=2, max_response_tokens=8, max_num_seqs=8, gpu_memory_utilization=0.3,
                            enforce_eager=True)
        worker = RolloutWorker(cfg, str(folder), dtype=_dtype(device))
        loop = asyncio.new_event_loop()
        try:
            seqs = [TrainSequence(list(range(5, 25)), list(range(30, 38)), [0.0] * 8, 1.0, 0)]
            learner.train_step(seqs * 4, count_loss_tokens(seqs * 4), 1)
            exported = learner.export_ipc("v1", 1 << 20, ["rollout[0]"])
            stats = loop.run_until_complete(worker.update_weights_ipc(exported, 1))
            learner.release_ipc("v1", "rollout[0]")
            engine = loop.run_until_complete(worker.compute_logprobs(seqs[0].prompt_token_ids,
                                                                     seqs[0].response_token_ids))
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, _dtype(device)))
            model = model.to(device).eval()
            model.load_state_dict({k: v.to(device) for k, v in learner._full_state().items()}, strict=False)
            ours = reference_logprobs(model, seqs, 1.0)[0]
            gap = max(abs(a - b) for a, b in zip(engine, ours))
        finally:
            learner.drop_ipc("v1")  # nothing left after the release; frees the buckets had the load failed
            loop.run_until_complete(worker.shutdown())
            learner.shutdown()
    return {"status": "ok" if gap < LOGPROB_TOL_BF16 else "fail", "max_logprob_gap": gap,
            "sync_s": stats.get("seconds"),
            "note": f"engine on the learner's {device} loaded {stats.get('tensors')} tensors by IPC in "
                    f"{stats.get('seconds', 0):.2f} s; its log-probs within {gap:.2e} of the learner's"}


def _tokenizer_for(folder: Path) -> None:
    """A word-level tokenizer over the small model's vocabulary (vLLM needs one to start; no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(SMALL_QWEN3["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", eos_token="t1").save_pretrained(str(folder))


def ray_smoke(device: str) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix="device-check-"))
    gpus = ["learner.num_gpus=0.5", "rollout.num_gpus=0.5", "rollout.gpu_memory_utilization=0.3"]
    overrides = ["steps=3", f"run_dir={run_dir}", "weight_sync.transport.name=ipc",
                 "cluster.placement_strategy=STRICT_PACK",
                 *(gpus if device == "cuda" else [])]
    train = subprocess.run([sys.executable, "-m", "driver.train", "smoke", *overrides], cwd=ROOT,
                           capture_output=True, text=True, timeout=420)
    if train.returncode != 0:
        return {"status": "fail", "note": f"driver.train smoke (ipc) exited {train.returncode}: "
                                          f"{(train.stderr or train.stdout)[-300:]}"}
    log = open(run_dir / "serve.log", "w")  # a file, not a pipe nobody reads (a full pipe would stall the server)
    server = subprocess.Popen([sys.executable, "-m", "driver.serve", "--model", str(run_dir / "export"),
                               *(["serve.num_gpus=0.3"] if device == "cuda" else [])],
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        answer = _select_when_up("http://127.0.0.1:8000/v1/select", 240)
    finally:
        server.terminate()
        server.wait(60)
        log.close()
    ok = isinstance(answer, dict) and "index" in answer
    return {"status": "ok" if ok else "fail", "note": f"3 colocated steps; /v1/select answered {str(answer)[:120]}"}


def _select_when_up(url: str, wait_s: float):
    import urllib.request

    body = json.dumps({"problem": "Compute 2 * 9 - 4.", "candidates": ["18 - 4 = 14\nAnswer: 14",
                                                                      "18 - 4 = 22\nAnswer: 22"]}).encode()
    deadline, last = time.monotonic() + wait_s, None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=60) as r:
                return json.loads(r.read())
        except Exception as e:
            last = e
            time.sleep(3)
    return f"no answer within {wait_s:g} s: {last!r}"


# ----------------------------------------------------------------------------- driver
def run_tier(report: Report, tier: str, device: str, cpu_too: bool = False) -> None:
    missing = [need for need in NEEDS.get(tier, ()) if not report.have.get(need, False)
               and not (cpu_too and need == "cuda")]
    if missing:
        why = ", ".join("CUDA" + (" (--device cpu)" if device == "cpu" else " (no GPU visible)") if m == "cuda"
                        else f"{m} (does not import)" for m in missing)
        report.emit({"tier": tier, "status": "skipped", "seconds": 0.0, "note": f"needs {why}"})
        return
    start = time.monotonic()
    try:
        result = globals()[tier](device)
    except Exception as e:
        result = {"status": "error", "note": f"{type(e).__name__}: {str(e)[:300]}", "trace": traceback.format_exc()}
    result = {"tier": tier, **result, "seconds": time.monotonic() - start}
    report.emit(result)
    if tier == "versions":
        report.have = result.get("have", {})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", default="")
    parser.add_argument("--tiers", default=",".join(TIERS), help="comma-separated subset of " + ", ".join(TIERS))
    parser.add_argument("--cpu-too", action="store_true",
                        help="with --device cpu, run the CUDA tiers on CPU too (fp32, IPC over /dev/shm files): "
                             "checks this script's own code without a GPU (learner_ipc + vllm_ipc take ~3 min)")
    parser.add_argument("--deadline-s", type=float, default=480.0, help="stop everything after this (a hang costs "
                                                                        "at most this)")
    args = parser.parse_args(argv)
    tiers = [t for t in args.tiers.split(",") if t]
    unknown = sorted(set(tiers) - set(TIERS))
    if unknown:
        parser.error(f"unknown tiers {unknown}; choose from {list(TIERS)}")
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if args.device == "cuda" else "cpu")
    report = Report(args.out)

    def give_up():
        print(f"device check: deadline {args.deadline_s:g} s passed\n" + report.table(), flush=True)
        os._exit(3)

    watchdog = threading.Timer(args.deadline_s, give_up)
    watchdog.daemon = True
    watchdog.start()
    for tier in ["versions"] + [t for t in tiers if t != "versions"]:
        run_tier(report, tier, args.device, args.cpu_too and args.device == "cpu")
    watchdog.cancel()
    print(report.table(), flush=True)
    return 1 if any(r["status"] in ("fail", "error") for r in report.results) else 0


if __name__ == "__main__":
    sys.exit(main())
