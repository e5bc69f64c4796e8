"""Pointer probe in pairs (session 17): can the warm-started tiny model find, of two candidates, the one whose
final answer is X ("Answer X. Judgment: ")? Pairs with two different answers only; chance 0.5. No correctness
labels. Adapted from ../shared/probes/pointer_probe.py (that one: 2-8 candidates, not learned in 400 steps)."""
import json, random, sys, time
sys.path.insert(0, "."); sys.path.insert(0, "benchmarks")
import torch
from core.config import load_config
from core.chat import prompt_token_ids, index_token_ids
from driver.data.dataset import load_dataset
from driver.prepare import prepare
from transformers import AutoModelForCausalLM, AutoTokenizer

STEPS, LR, OVERRIDES = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
torch.set_num_threads(2); torch.manual_seed(0); rng = random.Random(0)
cfg = load_config("configs/default.yaml", OVERRIDES)
prepared = prepare(cfg.data, cfg.model, with_model=True, progress=False)
data = load_dataset(prepared.dataset_dir)
distinct = lambda ts: [t for t in ts if len(t.candidates) == 2 and t.candidate_answers[0] != t.candidate_answers[1]]
train, held = distinct(data.train), distinct(data.heldout)[:400]
print(f"model {prepared.model_dir}; {len(train)} train / {len(held)} held-out pairs with distinct answers", flush=True)
tok = AutoTokenizer.from_pretrained(prepared.model_dir)
model = AutoModelForCausalLM.from_pretrained(prepared.model_dir, dtype=torch.float32)
idx = index_token_ids(tok, 2)

def item(t, r):
    j = r.randrange(2)
    return prompt_token_ids(tok, t.prompt + f"\nAnswer {t.candidate_answers[j]}."), j

def last(seqs):
    width = max(map(len, seqs)); pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = torch.full((len(seqs), width), pad); mask = torch.zeros_like(ids)
    for k, s in enumerate(seqs):
        ids[k, width - len(s):] = torch.tensor(s); mask[k, width - len(s):] = 1
    return model(input_ids=ids, attention_mask=mask).logits[:, -1, idx]

hr = random.Random(1); held_items = [item(t, hr) for t in held]
def acc():
    model.eval(); ok = 0
    with torch.no_grad():
        for s in range(0, len(held_items), 32):
            ch = held_items[s:s + 32]
            ok += sum(int(row.argmax()) == j for (_, j), row in zip(ch, last([c[0] for c in ch])))
    model.train(); return ok / len(held_items)

t0 = time.time(); log = [{"step": 0, "pointer": acc()}]; print(log[-1], flush=True)
opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
for step in range(1, STEPS + 1):
    batch = [item(train[rng.randrange(len(train))], rng) for _ in range(16)]
    loss = torch.nn.functional.cross_entropy(last([b[0] for b in batch]), torch.tensor([b[1] for b in batch]))
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step()
    if step % 100 == 0:
        log.append({"step": step, "pointer": acc(), "loss": round(loss.item(), 3), "s": round(time.time() - t0)})
        print(log[-1], flush=True)
json.dump(log, open("runs/s17-ptr/log.json", "w"))
