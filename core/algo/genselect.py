"""GenSelect prompts, judgment parsing and the selection reward.

The selector reads a problem and N candidate solutions, reasons, and ends with `Judgment: IDX`
(Learning Generative Selection for Best-of-N, arXiv 2602.02143; prompt conventions of NeMo-Skills'
GenSelect). Conventions kept here:

* candidates are rendered as `Solution {i}:` blocks indexed 0..N-1 in the order given (the caller shuffles
  and keeps the index -> candidate mapping explicitly; never recover an index with `list.index(text)`,
  which breaks on duplicate candidates);
* reasoning traces (`<think>...</think>`) are stripped from candidates; over-long candidates are refused
  with an error rather than silently truncated (the data builder drops and counts them);
* the *last* `Judg(e)ment: IDX` in the response wins (without one, the last answer line naming a candidate,
  `Answer: X #IDX`, the beside layout's pointer); no match, an index outside 0..N-1, or an index not
  written canonically (leading zeros such as `007` or `0000`: a degenerate output an RL policy can drift
  into) is a parse failure with a reason (reward 0 in training; flagged in serving);
* a response's own reasoning trace is not its answer: judgments inside `<think>...</think>` are ignored, and a
  response whose `<think>` never closes has no judgment;
* a response cut at the token budget whose text ends in the index's digits may have lost digits (`Judgment: 1`
  of `Judgment: 12`, several tokens): a parse failure (`cut_index`), never the shorter index.

Pure: stdlib only.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Optional, Sequence

PROMPT_HEADER = (
    "You are given a problem and {n} candidate solutions. Some may be wrong. "
    "Check the solutions and pick a correct one."
)
# Optional last line of each candidate's block (`tiny.solution_end_line`): the block's index written again
# right after its final answer, so a small model finds a block's label next to the text that decides it.
SOLUTION_END_LINE = "End of solution {i}."
# Optional prefix of every line of candidate i (`tiny.line_labels`): the label beside each line's own check.
LINE_LABEL = "{i}| "
# Suffix of each candidate's final-answer line (`tiny.answer_labels`): its index beside the value it states.
ANSWER_LABEL = " #{i}"
_ANSWER_LINE_RE = re.compile(r"^(Answer:[^\n]*?)[ \t]*$", flags=re.MULTILINE)
# Header of the candidates' section when they are shown side by side (`data.side_by_side`).
SIDE_BY_SIDE_HEADER = "Solutions 0 to {last}, line by line:"
# A model folder's prompt style, written beside exported weights so that serving renders prompts as training did.
PROMPT_STYLE_FILE = "genselect_prompt.json"
PROMPT_FOOTER = 'Which solution is correct? Finish with "Judgment: IDX" where IDX is a number from 0 to {last}.'

_THINK_RE = re.compile(r"<think>.*?</think>", flags=re.DOTALL)
_UNCLOSED_THINK_RE = re.compile(r"^.*?</think>", flags=re.DOTALL)
JUDGMENT_RE = re.compile(r"Judg(?:e)?ment:\s*(-?\d+)")
# A response's own answer line naming a candidate (`Answer: 24 #3`, the beside layout's pointer): read when the
# response writes no `Judgment:` (the solve-then-point tiny model ends its worked solution so)
POINTER_RE = re.compile(r"^Answer:[^\n#]*#[ \t]*(-?\d+)[ \t]*$", flags=re.MULTILINE)
# The own answer X of such a line (`Answer: 24 #3` -> "24"; driver.eval_metrics.own_answer_breakdown)
OWN_ANSWER_RE = re.compile(r"^Answer:([^\n#]*)#", flags=re.MULTILINE)


class CandidateTooLong(ValueError):
    """A candidate exceeds the character cap; the caller drops the prompt and counts it."""


def after_thinking(response: str) -> Optional[str]:
    """The part of a response after its reasoning trace: the text after the last `</think>` (a trace whose
    `<think>` the prompt opened ends there too), the whole text without one, or None when a `<think>` never
    closes (the response ended, or was cut, while still reasoning)."""
    if "</think>" in response:
        return response.rsplit("</think>", 1)[1]
    return None if "<think>" in response else response


def strip_thinking(text: str) -> str:
    """Remove `<think>...</think>` blocks (and a leading unclosed trace ending in `</think>`)."""
    text = _THINK_RE.sub("", text)
    if "</think>" in text:
        text = _UNCLOSED_THINK_RE.sub("", text, count=1)
    return text.strip()


@dataclass(frozen=True)
class PromptStyle:
    """How candidate blocks are rendered; a model is served with the style it was trained with.

    Attributes:
        end_lines: each block ends with `End of solution {i}.` (SOLUTION_END_LINE).
        line_labels: every non-empty line of candidate i starts with `{i}| ` (LINE_LABEL).
        side_by_side: the candidates in one section, line by line: line 1 of every candidate (labelled `{i}| `,
            in index order), then line 2 of every candidate, ...; where candidates differ, the versions of a line
            sit next to each other (`render_side_by_side`). Implies line labels.
        answer_labels: every `Answer: X` line of candidate i ends with ` #{i}` (ANSWER_LABEL, the `beside` layout).
    """
    end_lines: bool = False
    line_labels: bool = False
    side_by_side: bool = False
    answer_labels: bool = False

    @classmethod
    def of(cls, data_cfg) -> "PromptStyle":
        """The style a dataset's settings ask for (`driver.data.dataset.settings`: the data keys with the recipe's
        layout keys; or any object with those keys as attributes, e.g. a dataset manifest's config; a key it lacks,
        as in manifests written before the key existed, is off)."""
        return cls(end_lines=bool(getattr(data_cfg, "solution_end_line", False)),
                   line_labels=bool(getattr(data_cfg, "line_labels", False)),
                   side_by_side=bool(getattr(data_cfg, "side_by_side", False)),
                   answer_labels=bool(getattr(data_cfg, "answer_labels", False)))


PLAIN = PromptStyle()


def label_answer_lines(i: int, body: str) -> str:
    """`body` with every line that starts with `Answer:` ending in ` #{i}` (trailing blanks dropped)."""
    return _ANSWER_LINE_RE.sub(lambda m: m.group(1) + ANSWER_LABEL.format(i=i), body)


def render_block(i: int, body: str, style: PromptStyle) -> str:
    """Candidate i's block: `Solution {i}:`, its text (lines labelled if the style says so), its end line."""
    if style.line_labels:
        label = LINE_LABEL.format(i=i)
        body = "\n".join(label + line if line.strip() else line for line in body.split("\n"))
    end = "\n" + SOLUTION_END_LINE.format(i=i) if style.end_lines else ""
    return f"Solution {i}:\n{body}{end}"


def render_side_by_side(bodies: Sequence[str], style: PromptStyle) -> str:
    """The candidates' section of a side-by-side prompt: row k holds line k of every candidate that has one,
    each as `{i}| line` in index order (blank lines dropped), then each candidate's end line if the style asks.
    For two candidates that share all but one line, the two versions of that line are adjacent."""
    lines = [[line for line in body.split("\n") if line.strip()] for body in bodies]
    rows = [LINE_LABEL.format(i=i) + cand[k] for k in range(max(map(len, lines))) for i, cand in enumerate(lines)
            if k < len(cand)]
    if style.end_lines:
        rows += [LINE_LABEL.format(i=i) + SOLUTION_END_LINE.format(i=i) for i in range(len(bodies))]
    return "\n".join([SIDE_BY_SIDE_HEADER.format(last=len(bodies) - 1), *rows])


def build_prompt(problem: str, candidates: Sequence[str], max_candidate_chars: Optional[int] = None,
                 style: PromptStyle = PLAIN) -> str:
    """Render the GenSelect prompt for `problem` and `candidates` (shown as Solution 0..N-1) in `style`.

    Raises:
        ValueError: fewer than 2 candidates.
        CandidateTooLong: a candidate (after stripping its reasoning trace) exceeds max_candidate_chars.
    """
    if len(candidates) < 2:
        raise ValueError(f"a selection prompt needs at least 2 candidates, got {len(candidates)}")
    bodies = []
    for i, candidate in enumerate(candidates):
        body = strip_thinking(candidate)
        if max_candidate_chars is not None and len(body) > max_candidate_chars:
            raise CandidateTooLong(f"candidate {i} has {len(body)} characters (cap {max_candidate_chars})")
        bodies.append(label_answer_lines(i, body) if style.answer_labels else body)
    blocks = ([render_side_by_side(bodies, style)] if style.side_by_side
              else [render_block(i, body, style) for i, body in enumerate(bodies)])
    n = len(candidates)
    parts = [PROMPT_HEADER.format(n=n), f"Problem:\n{problem.strip()}", *blocks, PROMPT_FOOTER.format(last=n - 1)]
    return "\n\n".join(parts)


MIRROR_SUFFIX = "/mirror"  # prompt id of a task's twin with its candidates in reverse order (curriculum.mirror)


def reordered_task(task, order: Sequence[int], style: PromptStyle, prompt_id: str):
    """`task` (a SelectionTask) showing its candidates `order[0], order[1], ...` as `Solution 0, 1, ...`, with
    answers and labels to match and the prompt rendered again: the same decision, other indices."""
    from dataclasses import replace

    pick = lambda values: tuple(values[i] for i in order)  # noqa: E731
    return replace(task, prompt_id=prompt_id, candidates=pick(task.candidates),
                   candidate_answers=pick(task.candidate_answers), labels=pick(task.labels),
                   prompt=build_prompt(task.problem, pick(task.candidates), style=style))


def mirrored_task(task, style: PromptStyle):
    """`task` with its candidates in reverse order, id `{prompt_id}/mirror`: beside the original in one batch,
    a push towards an index (a position preference) cancels and only a push towards content is left."""
    return reordered_task(task, range(task.num_candidates - 1, -1, -1), style, task.prompt_id + MIRROR_SUFFIX)


def write_prompt_style(folder, style: PromptStyle) -> None:
    """Record in model `folder` how its selection prompts were rendered (read by `read_prompt_style`)."""
    (Path(folder) / PROMPT_STYLE_FILE).write_text(json.dumps(asdict(style)))


def read_prompt_style(folder) -> PromptStyle:
    """The prompt style recorded in model `folder`; a folder without the file (any model not trained here) gets
    the plain GenSelect prompt. Older files name `solution_end_line` for `end_lines`."""
    path = Path(folder) / PROMPT_STYLE_FILE
    saved = json.loads(path.read_text()) if path.is_file() else {}
    if "solution_end_line" in saved:
        saved.setdefault("end_lines", saved.pop("solution_end_line"))
    unknown = set(saved) - {f.name for f in fields(PromptStyle)}
    if unknown:
        raise ValueError(f"{path}: unknown prompt style keys {sorted(unknown)} (written by a newer genselect-rl?)")
    return PromptStyle(**{k: bool(v) for k, v in saved.items()})


class ParseStatus:
    """Labels of a parsed judgment; also used as metric labels."""
    OK = "ok"
    NO_JUDGMENT = "no_judgment"
    OUT_OF_RANGE = "out_of_range"
    MALFORMED_INDEX = "malformed_index"
    CUT_INDEX = "cut_index"


@dataclass(frozen=True)
class Judgment:
    """The selector's choice: `index` is None unless `status == ParseStatus.OK`."""
    index: Optional[int]
    status: str
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == ParseStatus.OK


def parse_judgment(response: str, num_candidates: int, truncated: bool = False) -> Judgment:
    """Parse the last `Judgment: IDX` of a response (else its last `Answer: X #IDX` line); IDX must be in
    0..num_candidates-1. Judgments inside a `<think>` trace do not count (`after_thinking`). `truncated`: the
    response was cut at the token budget (finish reason `length`); its index is refused when the text ends in it,
    since the digits after the cut are unknown."""
    body = after_thinking(response)
    if body is None:
        return Judgment(None, ParseStatus.NO_JUDGMENT, "the reasoning trace (<think>) never closes: no judgment "
                                                       "after it")
    matches = list(JUDGMENT_RE.finditer(body)) or list(POINTER_RE.finditer(body))
    if not matches:
        return Judgment(None, ParseStatus.NO_JUDGMENT, "no 'Judgment: IDX' (or 'Answer: X #IDX') in the response")
    last = matches[-1]
    written = last.group(1)
    if truncated and body[last.end(1):] == "":
        return Judgment(None, ParseStatus.CUT_INDEX, f"the response was cut at the token budget right after index "
                                                     f"{written[:20]!r}: digits may be missing")
    if written.lstrip("-") != str(abs(int(written))):
        return Judgment(None, ParseStatus.MALFORMED_INDEX, f"index {written[:20]!r} is not written canonically")
    index = int(written)
    if not 0 <= index < num_candidates:
        return Judgment(None, ParseStatus.OUT_OF_RANGE, f"index {index} not in 0..{num_candidates - 1}")
    return Judgment(index, ParseStatus.OK)


def render_judgment(index: int, rationale: str = "") -> str:
    """A well-formed selector response naming candidate `index` (warm-start targets, tests)."""
    prefix = f"{rationale.strip()}\n" if rationale.strip() else ""
    return f"{prefix}Judgment: {index}"


def selection_reward(judgment: Judgment, candidate_scores: Sequence[float], mode: str = "binary") -> float:
    """Reward of a selection (GenSelect, arXiv 2602.02143: 1 if the chosen candidate is correct, else 0).

    Args:
        judgment: the parsed choice; a parse failure scores 0.
        candidate_scores: per-candidate verifier scores in [0, 1] (1.0 = correct / all tests pass).
        mode: "binary" (1 iff the chosen candidate's score is 1) or "partial" (the chosen candidate's
            score itself, e.g. its unit-test pass fraction: the continuous reward max@k needs).
    """
    if not judgment.ok:
        return 0.0
    score = float(candidate_scores[judgment.index])
    if mode == "binary":
        return 1.0 if score >= 1.0 else 0.0
    if mode == "partial":
        return min(max(score, 0.0), 1.0)
    raise ValueError(f"unknown reward mode {mode!r}; expected 'binary' or 'partial'")
