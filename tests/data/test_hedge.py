"""The optional verbal-confidence cue of the procedural generator: off by default, noisy when on, and it
never changes a candidate's answer line."""
from driver.data import procedural as P


def _candidates(spec, n=200):
    return [c for item in P.generate(n, 8, 0, spec) for c in item["candidates"]]


def _hedged(text):
    return any(h in text for h in P.HEDGES)


def test_off_by_default():
    assert not any(_hedged(c) for c in _candidates(P.ProceduralSpec(), 50))


def test_wrong_candidates_hedge_more_but_not_always():
    spec = P.ProceduralSpec(hedge_wrong_rate=0.7, hedge_correct_rate=0.15)
    items = P.generate(300, 8, 0, spec)
    wrong = [_hedged(c) for it in items for c in it["candidates"] if c.rsplit("Answer:", 1)[1].strip() != it["answer"]]
    right = [_hedged(c) for it in items for c in it["candidates"] if c.rsplit("Answer:", 1)[1].strip() == it["answer"]]
    rate_wrong, rate_right = sum(wrong) / len(wrong), sum(right) / len(right)
    assert 0.6 < rate_wrong < 0.8 and 0.08 < rate_right < 0.22


def test_hedge_keeps_the_answer_line_last():
    for text in _candidates(P.ProceduralSpec(hedge_wrong_rate=1.0, hedge_correct_rate=1.0), 20):
        assert text.splitlines()[-1].startswith("Answer: ") and _hedged(text)


def test_strip_hedges_restores_the_unhedged_solution():
    import random
    for text in _candidates(P.ProceduralSpec(), 20):
        assert P.strip_hedges(P.hedge(text, random.Random(len(text)))) == text


def test_train_no_cue_share_strips_a_seeded_share_of_problems_and_keeps_labels():
    from driver.data.builder import without_cue
    from driver.data.problem import RawProblem

    spec = P.ProceduralSpec(hedge_wrong_rate=1.0, hedge_correct_rate=1.0)
    problems = [RawProblem(id=str(i), domain="math", problem=it["problem"], reference=it["answer"],
                           candidates=tuple(it["candidates"]), candidate_answers=tuple(it["candidates"]),
                           labels=(1.0,) * len(it["candidates"]))
                for i, it in enumerate(P.generate(200, 4, 0, spec))]
    out = without_cue(problems, 0.5, seed=3)
    stripped = [p for p in out if not any(_hedged(c) for c in p.candidates)]
    assert 70 < len(stripped) < 130 and all(any(_hedged(c) for c in p.candidates) for p in out if p not in stripped)
    assert [p.labels for p in out] == [p.labels for p in problems] and [p.id for p in out] == [p.id for p in problems]
    assert without_cue(problems, 0.5, seed=3) == out and without_cue(problems, 0.0, seed=3) == problems
