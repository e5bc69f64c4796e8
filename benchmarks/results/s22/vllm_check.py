"""Does vLLM (CPU) run the wired circuit as transformers does? Greedy continuation of repeated random tokens."""
import os
import sys

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main():
    import random

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    path = sys.argv[1]
    rng = random.Random(0)
    llm = LLM(model=path, dtype="float32", enforce_eager=True, max_model_len=512, block_size=128)
    hits = total = 0
    prompts, targets = [], []
    for _ in range(16):
        first = [rng.randrange(3, 538) for _ in range(40)]
        prompts.append(TokensPrompt(prompt_token_ids=first + first[:8]))
        targets.append(first[8:24])
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=16))
    for out, target in zip(outs, targets):
        got = list(out.outputs[0].token_ids)
        hits += sum(a == b for a, b in zip(got, target))
        total += len(target)
    print(f"vLLM greedy copy accuracy: {hits / total:.3f} over {total} tokens")


if __name__ == "__main__":
    main()
