"""Is a math answer equal to the reference? One implementation for dataset labels and training rewards.

Answers arrive as people and models write them: `504`, `\\frac{1}{2}`, `2^(m+1)`, `x = 3`, `(1, 2]`,
`50%`, `10 cm`, `3 and 5`, `No`, and prose (`2*C(10, 5), or equivalently 504`; `The limit exists and is
equal to 4`). Each side (reference and candidate) is read the same way (`answer_forms`):

1. the last `\\boxed{...}` if there is one (`extract_answer` also takes an `Answer: ...` line);
2. text with LaTeX delimiters (`$`, `\\(`, `\\[`) goes to math-verify's own extraction as it is (its LaTeX
   and expression configs: "final answer is", "answer:", the last expression);
3. a bare formula (digits, operators, brackets, one-letter variables, LaTeX commands, `sqrt`/`pi`/`inf`,
   `and`/`or` between parts) is read as LaTeX (`$...$`) -- math-verify reads bare `2x+1` as `2`;
4. prose: the formula after the last answer cue (`answer is`, `is`, `=`, `equal to`, ...) of the last
   sentence when there is one, else math-verify's expression extraction (the last number or expression).
   Wrapping a sentence in `$...$` instead (the old behaviour) made it a product of letters.

A reference with no mathematical reading (`No`, `Tuesday`) is a text answer: compared as normalised text
(case, `\\text{}`, punctuation), and a yes/no reference against the candidate's first yes/no word.
Two plain integers are compared exactly.

Timeouts are never a silent 0. `timeout_s=None` turns math-verify's own `signal.alarm` timeouts off: the
caller runs the check inside a killable process deadline (`sandbox.workers.ProcessPool`), and an overrun is a
"timeout" verdict there. With a whole number of seconds, math-verify's timeouts are raised (not swallowed)
and become a "timeout" verdict here. That mode needs the main thread of a process (`signal.alarm`).
"""
from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Optional

from sandbox.workers import ERROR, OK, TIMEOUT

_INT_RE = re.compile(r"^[+-]?\d+$")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_LINE_RE = re.compile(r"(?im)^\s*\**(?:final\s+)?answer\**\s*(?:is)?\s*[:=]?\s*(.+?)\s*$")
_LATEX_DELIMS = ("$", "\\(", "\\[")
_MATH_WORDS = {"sqrt", "pi", "inf", "infty", "infinity", "and", "or", "sin", "cos", "tan", "cot", "sec", "csc",
               "log", "ln", "exp", "mod", "arcsin", "arccos", "arctan", "cup", "cap"}
_FORMULA_CHARS = re.compile(r"[^0-9A-Za-z\s+\-*/^_=<>()\[\]{},.!%|':;\\≤≥√π∞×÷−·]")
_UNICODE = {"≤": "\\le ", "≥": "\\ge ", "√": "\\sqrt", "π": "\\pi ", "∞": "\\infty ", "×": "\\times ",
            "÷": "\\div ", "−": "-", "·": "\\cdot "}
_CUE_RE = re.compile(r"(?i)(?:final answer|answer)\s*(?:is|:|=)?|\b(?:is|are|equals?|equal to|be|gives|get)\b|=")
_ANSWER_CUE_RE = re.compile(r"(?i)(?:final answer|answer)\s*(?:is|:|=)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\\$])")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_YES_NO = ("yes", "no", "true", "false")


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check: `score` in [0, 1]; `status` "ok", "timeout" or "error"; `detail` says why."""
    score: float
    status: str = OK
    detail: str = ""


def extract_answer(text: str) -> str:
    """The final answer of a worked solution: the last `\\boxed{...}`, else the last `Answer: ...` line,
    else the whole text (`answer_forms` then finds the answer in it)."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    lines = _ANSWER_LINE_RE.findall(text)
    return lines[-1].strip().strip("*").strip().rstrip(".") if lines else text.strip()


def last_boxed(text: str) -> Optional[str]:
    """The content of the last `\\boxed{...}` (braces balanced), or None."""
    starts = [m.end() for m in _BOXED_RE.finditer(text)]
    if not starts:
        return None
    depth, i = 1, starts[-1]
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def is_formula(text: str) -> bool:
    """A bare formula: only math characters, and no word of two or more letters other than LaTeX commands,
    math function names and `and`/`or` (so `x = 3`, `2^(m+1)`, `(1, 2]`, `3 and 5`; not `10 cm`, `No`)."""
    if not text or _FORMULA_CHARS.search(text):
        return False
    bare = re.sub(r"\\[A-Za-z]+", " ", text)
    if any(w.lower() not in _MATH_WORDS for w in re.findall(r"[A-Za-z]{2,}", bare)):
        return False
    return bool(re.search(r"[0-9A-Za-zπ∞]", text))


def _as_latex(formula: str) -> str:
    """A bare formula as inline LaTeX: unicode symbols and `pi`/`inf` spelled as LaTeX commands."""
    for ch, cmd in _UNICODE.items():
        formula = formula.replace(ch, cmd)
    formula = re.sub(r"(?<![\\A-Za-z])pi(?![A-Za-z])", r"\\pi ", formula)
    formula = re.sub(r"(?<![\\A-Za-z])(?:infinity|inf)(?![A-Za-z])", r"\\infty ", formula)
    return "$" + formula.replace("**", "^").strip() + "$"


def answer_tail(text: str) -> Optional[str]:
    """In prose, the formula the text ends on: after the last "answer is"/"answer:" if the text has one, else
    after the last cue (`is`, `are`, `=`, `equal to`, ...) of the last sentence. None if that is not a formula."""
    cues = list(_ANSWER_CUE_RE.finditer(text))
    if cues:
        tail = _SENTENCE_END.split(text[cues[-1].end():])[0]
    else:
        sentence = [s for s in _SENTENCE_END.split(text) if s.strip()][-1]
        cues = list(_CUE_RE.finditer(sentence))
        if not cues:
            return None
        tail = sentence[max(cues, key=lambda m: m.end()).end():]
    tail = tail.strip().strip("*").strip().rstrip(".;!?").strip()
    return tail if is_formula(tail) else None


def answer_forms(text: str, timeout_s: Optional[int] = None) -> list:
    """What math-verify reads from one answer text (module docstring, steps 1-4): a list of sympy objects
    and strings, empty when nothing mathematical was found. math-verify errors and timeouts are raised."""
    from math_verify import parse

    text = extract_answer(str(text)).replace("\\$", "")  # an escaped dollar is currency, not math mode

    def read(s: str) -> list:
        return parse(s, parsing_timeout=timeout_s, raise_on_error=True)

    if any(d in text for d in _LATEX_DELIMS):
        return read(text)
    if is_formula(text):
        return read(_as_latex(text)) or read(text)
    tail = answer_tail(text)
    return (read(_as_latex(tail)) if tail else []) or read(text)


def text_key(text: str) -> str:
    """A text answer normalised for comparison: `\\text{}` unwrapped, `$` dropped, lower case, outer
    punctuation and brackets stripped, spaces collapsed."""
    text = _TEXT_CMD.sub(r"\1", extract_answer(str(text))).replace("$", "").replace("\\(", "").replace("\\)", "")
    return " ".join(text.lower().split()).strip(" .,;:!?()[]{}\"'*")


def _has_math(forms: list) -> bool:
    return any(not isinstance(f, str) for f in forms)


def _text_verdict(answer: str, reference: str) -> Verdict:
    """Text answers (`No`, `Tuesday`): equal normalised text; a yes/no reference against the first yes/no
    word of the answer (`No, it is not possible.` answers `No`)."""
    ref, ans = text_key(reference), text_key(answer)
    if ref in _YES_NO:
        first = next((w for w in re.findall(r"[a-z]+", ans) if w in _YES_NO), "")
        return Verdict(float(first == ref), OK, "yes/no answer")
    return Verdict(float(bool(ref) and ans == ref), OK, "text answer")


def _needs_main_thread(timeout_s: Optional[int]) -> None:
    if timeout_s and threading.current_thread() is not threading.main_thread():
        raise ValueError("math-verify's own timeouts use signal.alarm, which only works in a process's main "
                         "thread: run the check in a worker process (sandbox.workers.ProcessPool), or pass "
                         "timeout_s=None inside a killable deadline")


class _NoTimeoutWarning(logging.Filter):
    """math-verify warns once per process that its timeouts are off; here that is by design (outer deadline)."""
    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_NoTimeoutWarning())


def check_answer(answer: str, reference: str, timeout_s: Optional[int] = None) -> Verdict:
    """Is `answer` mathematically equal to `reference`? (gold = reference; see the module docstring.)

    Verdicts: score 1/0 with status "ok" (an unparseable answer is a wrong answer); "error" when the reference
    is empty or a formula math-verify cannot read, or math-verify fails; "timeout" when one of math-verify's own
    timeouts fired (only with `timeout_s`; without it an overrun is the caller's process deadline).
    """
    _needs_main_thread(timeout_s)
    answer, reference = str(answer).strip(), str(reference).strip()
    if not reference:
        return Verdict(0.0, ERROR, "empty reference")
    if _INT_RE.match(answer) and _INT_RE.match(reference):
        return Verdict(float(int(answer) == int(reference)), OK, "integers")
    if answer == reference:
        return Verdict(1.0, OK, "identical strings")
    if not answer:
        return Verdict(0.0, OK, "empty answer")
    from math_verify import verify
    from math_verify.errors import TimeoutException

    parse_started = time.monotonic()
    try:
        gold = answer_forms(reference, timeout_s)
        if not _has_math(gold):
            if is_formula(extract_answer(reference)) or any(d in reference for d in _LATEX_DELIMS):
                return Verdict(0.0, ERROR, f"reference not parseable: {reference[:80]!r}")
            return _text_verdict(answer, reference)
        pred = answer_forms(answer, timeout_s)
    except TimeoutException:
        return Verdict(0.0, TIMEOUT, f"math-verify parse timed out after {timeout_s}s")
    except Exception as e:  # noqa: BLE001 -- an "error" verdict, counted by the caller, never a silent 0
        return Verdict(0.0, ERROR, f"parse failed: {type(e).__name__}: {e}")
    if timeout_s and time.monotonic() - parse_started >= timeout_s and not (gold and pred):
        return Verdict(0.0, TIMEOUT, f"math-verify parse timed out after {timeout_s}s (alarm swallowed)")
    if not pred:
        return Verdict(0.0, OK, "answer not parseable")
    failure = None
    for g, p in itertools.product(gold, pred):
        started = time.monotonic()
        try:
            if verify(g, p, timeout_seconds=timeout_s, raise_on_error=True, allow_set_relation_comp=True):
                return Verdict(1.0, OK)
        except TimeoutException:
            return Verdict(0.0, TIMEOUT, f"math-verify comparison timed out after {timeout_s}s")
        except Exception as e:  # noqa: BLE001 -- reported as an "error" verdict, never a silent 0
            failure = failure or f"{type(e).__name__}: {e}"
        if timeout_s and time.monotonic() - started >= timeout_s:
            # The alarm fired inside sympy code that catches broad exceptions, so verify answered False:
            # a comparison that ran out its time is a timeout, not a wrong answer.
            return Verdict(0.0, TIMEOUT, f"math-verify comparison timed out after {timeout_s}s (alarm swallowed)")
    return Verdict(0.0, ERROR, f"comparison failed: {failure}") if failure else Verdict(0.0, OK)


def warm_up() -> None:
    """Exercise the common answer shapes once (sympy's lazy imports and caches), outside any deadline."""
    for answer, reference in (("4", "3"), ("0.5", "\\frac{1}{2}"), ("2x+1", "1+2x"), ("x = 3", "3"),
                              ("the answer is 4", "4")):
        check_answer(answer, reference)


__all__ = ["Verdict", "check_answer", "answer_forms", "extract_answer", "last_boxed", "is_formula",
           "answer_tail", "text_key", "warm_up", "OK", "TIMEOUT", "ERROR"]
