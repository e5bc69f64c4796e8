"""Is any solution check learnable from the selection label? `benchmarks/learnability.py` on variants of the
procedural task that keep one kind of check (issue 7, session 10; BENCHMARKS.md).

    .venv/bin/python benchmarks/check_probes.py VARIANT [learnability.py arguments ...]

VARIANT (each patches the data generator for this process only; nothing here is a config of the project):

* `miscopy`: every wrong candidate's slip is a miscopy (a carried value, or the final `Answer:`, differs from
  the line it copies); no arithmetic needed to check it;
* `final`: only the final answer is miscopied (`7 + 5 = 12` then `Answer: 21`): the simplest relational check;
* `lines`: the unchanged slips, every candidate line prefixed with its candidate's index (`0| 7 + 5 = 12`) in the
  selection prompts (passes learnability.py's `--line-labels`, i.e. `data.line_labels=true`, a prompt style of
  the project since session 11) and, with a random index per text, in the pretraining corpus, so a line check
  can be read next to its label (use with `model.pretrain.slipped_share` > 0 for the corpus part to matter).

Use a `data.seed` of its own per variant: the dataset cache key does not see the patch.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def only_miscopies(final_only: bool) -> None:
    from driver.data import worked

    every = worked.Plan.possible_slips

    def possible_slips(self):
        return [s for s in every(self) if s.kind == "miscopy" and (not final_only or s.step == len(self.steps))]

    worked.Plan.possible_slips = possible_slips


def index_every_line() -> None:
    """Label the pretraining corpus's solution lines (the prompts are labelled by `data.line_labels=true`)."""
    import driver.models.pretrain as pretrain

    corpus = pretrain.corpus_text

    def corpus_text(problem, solution, position=None):
        text = corpus(problem, solution, position)
        head, sep, body = text.partition("Solution:\n")
        k = random.Random(text).randrange(8)
        return head + sep + "\n".join(f"{k}| {line}" if line.strip() else line for line in body.split("\n")) \
            if sep else text

    pretrain.corpus_text = corpus_text


def main(argv) -> int:
    variants = {"miscopy": lambda: only_miscopies(False), "final": lambda: only_miscopies(True),
                "lines": index_every_line}
    if not argv or argv[0] not in variants:
        sys.exit(f"usage: check_probes.py {{{','.join(variants)}}} [learnability.py arguments]")
    variants[argv[0]]()
    import learnability

    return learnability.main(argv[1:] + (["--line-labels"] if argv[0] == "lines" else []))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
