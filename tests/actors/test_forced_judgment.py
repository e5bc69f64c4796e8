"""The forced-judgment form's pieces without an engine: how indices are tokenized after the prefix, the index trie,
the stop strings, and the level-by-level index sampling on a scripted engine (the real engine: test_rollout.py)."""
from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest

from actors.rollout.forced_judgment import (_END, ForcedJudgment, IndexTokens, index_trie, own_judgment_stops,
                                            sample_index)

EOS = 0


class CharTokenizer:
    """One token per character (id = code point), EOS 0: indices 10-15 are two tokens."""
    eos_token_id = EOS
    chat_template = "{{ messages[0]['content'] }}"

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids) -> str:
        return "".join(chr(i) for i in ids if i != EOS)


class MergingTokenizer(CharTokenizer):
    """Writes a space and the digit after it as one token (as GPT-2-style tokenizers do): ` 3` is one id."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        ids, i = [], 0
        while i < len(text):
            if text[i] == " " and i + 1 < len(text) and text[i + 1].isdigit():
                ids.append(1000 + int(text[i + 1]))
                i += 2
            else:
                ids.append(ord(text[i]))
                i += 1
        return {"input_ids": ids}


def test_single_token_indices_follow_the_prefix():
    index = IndexTokens.of(CharTokenizer(), 8, EOS)
    assert index.prefix_text == "Judgment: " and index.tails == [[ord(str(k))] for k in range(8)]
    assert not index.needs_end_token()


def test_a_tokenizer_that_merges_the_space_into_the_digit_gets_the_prefix_without_it():
    index = IndexTokens.of(MergingTokenizer(), 4, EOS)
    assert index.prefix_text == "Judgment:" and index.tails == [[1000 + k] for k in range(4)]


def test_multi_token_indices_make_a_trie_with_an_end_where_one_is_a_prefix_of_another():
    index = IndexTokens.of(CharTokenizer(), 12, EOS)
    one, zero = ord("1"), ord("0")
    assert index.tails[10] == [one, zero] and index.needs_end_token()
    assert index.trie[one][_END] == 1 and index.trie[one][zero][_END] == 10
    assert index_trie([[5], [6, 7]]) == {5: {_END: 0}, 6: {7: {_END: 1}}}


def test_an_end_token_is_required_where_an_index_is_a_prefix_of_another():
    with pytest.raises(ValueError, match="end token"):
        IndexTokens.of(CharTokenizer(), 12, None)


def test_own_judgment_stops_leave_out_indices_that_prefix_others():
    assert own_judgment_stops(3) == ["Judgment: 0", "Judgment: 1", "Judgment: 2"]
    assert "Judgment: 1" not in own_judgment_stops(12) and "Judgment: 11" in own_judgment_stops(12)


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="reasoning_budget"):
        ForcedJudgment(-1)


class ScriptedWorker:
    """A rollout worker whose engine samples, at each request, the tokens `choose(context, allowed, n)` names; each
    sample's log-prob is uniform over the allowed tokens. Records every request's allowed tokens."""

    def __init__(self, choose):
        self.choose, self.requests, self.tokenizer, self.end_ids = choose, [], CharTokenizer(), [EOS]

    async def run_request(self, context, params, tag="w"):
        allowed = list(params.allowed_token_ids)
        self.requests.append(allowed)
        tokens = self.choose(list(context), allowed, params.n)
        outputs = [SimpleNamespace(index=i, token_ids=[t], logprobs=[{t: SimpleNamespace(logprob=-math.log(len(allowed)))}])
                   for i, t in enumerate(tokens)]
        return SimpleNamespace(outputs=outputs), 3, 0.0, 0.0


def test_sample_index_descends_the_trie_one_level_a_request():
    """12 candidates: the first level offers 0-9; after `1`, a second level offers `0`, `1` and the end token."""
    one, zero = ord("1"), ord("0")
    script = {1: [one, one, ord("7")], 2: [zero, EOS]}  # level -> the tokens sampled there
    worker = ScriptedWorker(lambda ctx, allowed, n: script[1][:n] if len(worker.requests) == 1 else script[2][:n])
    params = SimpleNamespace(temperature=1.0, top_p=1.0, output_kind=None)
    index = IndexTokens.of(worker.tokenizer, 12, EOS)
    picked, version = asyncio.run(sample_index(worker, [5, 6], 3, index, params))
    assert [p.index for p in picked] == [10, 1, 7] and version == 3
    assert picked[0].token_ids == [one, zero] and picked[1].token_ids == [one, EOS] and picked[2].token_ids == [55]
    assert worker.requests[0] == sorted(ord(str(k)) for k in range(10))
    assert sorted(worker.requests[1]) == sorted([zero, one, EOS])
    assert picked[0].allowed == [worker.requests[0], worker.requests[1]] and picked[2].allowed == [worker.requests[0]]
    assert picked[0].logprobs == [-math.log(10), -math.log(3)]
