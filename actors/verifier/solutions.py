"""What a generator's solution is judged as (`task=generator`, and model-sampled candidates): the final answer
of a math solution, the program of a code solution. Shared by the verifier pool (actors/verifier/verifier_pool.py) and
the data pipeline (driver/data/generated.py), so training and synthesis judge a text the same way. Pure (no
Ray, no vLLM).
"""
from __future__ import annotations

import re
from typing import Optional

from sandbox.math_answer import _ANSWER_LINE_RE, last_boxed

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def stated_answer(text: str) -> Optional[str]:
    """The answer a math solution *states*: the last `\\boxed{...}`, else the last `Answer: ...` line; None when
    it states none (a generator's solution without a final answer scores 0 as a parse failure, never by a
    number that happens to appear in its steps)."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    lines = _ANSWER_LINE_RE.findall(text)
    return lines[-1].strip().strip("*").strip().rstrip(".") if lines else None


def code_program(prompt: str, entry_point: str, text: str) -> str:
    """The program a code solution is judged as. A ```python block (a chat model's reply; the last one) that
    defines the entry point is the program itself; any other text is a completion of the prompt (HumanEval
    convention): prompt + text."""
    blocks = _CODE_BLOCK.findall(text)
    if blocks and re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", blocks[-1], re.MULTILINE):
        return blocks[-1]
    return prompt + (blocks[-1] if blocks else text)
