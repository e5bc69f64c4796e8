"""The embedded tiny model's chat templates: what its tokenizer appends to a selection prompt.

A tiny model built with `tiny.model.response=solve_point` carries `SOLVE_POINT_TEMPLATE` as its chat template: the
selection prompt, then the problem restated and `Solution:`, so the model writes a worked solution of its own and
ends it with `Answer: X #k`, the index of a candidate stating X (the beside layout, `tiny.answer_labels`), which
`parse_judgment` reads when no `Judgment:` line is written.

A tiny model built with `tiny.model.response=pick_point` carries `PICK_POINT_TEMPLATE`: the prompt, a blank line and
`core.chat.PICK_MARK`; the model writes its pick, the rollout the problem's head (`pick_point_head`), the model its
worked solution ending `Answer: X #k` (tiny_recipe/pick_point.py).
"""
from __future__ import annotations

from core.chat import PICK_MARK

# The solve-then-point tiny model's chat template: its user message (a selection prompt: `Problem:\n{problem}`, then
# `Solution 0:`... or `Solutions 0 to`...), a blank line, the problem again and `Solution:` (a worked solution's head,
# as `tiny_recipe.pretrain` writes its texts).
SOLVE_POINT_TEMPLATE = (
    "{%- set text = messages[0]['content'] -%}"
    "{{- text + '\\n\\nProblem:\\n' + text.split('\\nProblem:\\n', 1)[1].split('\\n\\nSolution', 1)[0]"
    " + '\\n\\nSolution:\\n' -}}")
# The pick-then-solve-and-point tiny model's chat template (`tiny.model.response=pick_point`): its user message, a blank
# line and `PICK_MARK`. The model writes the pick's index; the rollout then writes the problem's head
# (`pick_point_head`) and the model its worked solution, ending `Answer: X #k` (actors/rollout/rollout_worker.py).
PICK_POINT_TEMPLATE = "{%- set text = messages[0]['content'] -%}{{- text + '\\n\\n' + '" + PICK_MARK + "' -}}"


def is_pick_point(tokenizer) -> bool:
    """Whether the tokenizer is a pick-then-solve-and-point model's (its chat template is `PICK_POINT_TEMPLATE`)."""
    return getattr(tokenizer, "chat_template", None) == PICK_POINT_TEMPLATE


def pick_point_head(problem: str) -> str:
    """What follows the pick's index in a pick-then-solve-and-point response: a blank line and the problem's worked
    solution head, `Problem:\n{problem}\n\nSolution:\n` (as the pretraining's context rows after `Pick: #g`)."""
    return f"\n\nProblem:\n{problem}\n\nSolution:\n"
