"""Candidate programs for code problems: a reference solution plus realistic mutants.

No generator LLM runs here at scale, so HumanEval candidates are the canonical solution and mutants of it
that look like real bugs: an off-by-one in a `range` bound or a slice, a swapped comparison (`<` for
`<=`), a changed constant or return value, a wrong arithmetic operator, `and` for `or`. As with the math
generator, a problem has a few *common* mutants that several wrong candidates share.

Every candidate (correct or not) is re-rendered with `ast.unparse`, with docstrings removed and local
variables randomly renamed, so neither formatting nor text identity gives the correct ones away. Whether a
mutant is wrong is never assumed: labels come from running the tests in the sandbox (an equivalent mutant
is labeled correct).
"""
from __future__ import annotations

import ast
import builtins
import copy
import random

_CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq}
_BIN_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mod, ast.Mod: ast.FloorDiv}
_RENAMES = ("res", "out", "acc", "val", "tmp", "item", "cur", "k", "idx", "buf")


def _sites(tree: ast.AST) -> list:
    """(kind, node) for every place a mutation applies, in a stable order."""
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _CMP_SWAP:
            sites.append(("swap_comparison", node))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
            sites.append(("wrong_operator", node))
        elif isinstance(node, ast.BoolOp):
            sites.append(("and_or", node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and node.args:
            sites.append(("range_off_by_one", node))
        elif isinstance(node, ast.Slice) and (node.lower is not None or node.upper is not None):
            sites.append(("slice_off_by_one", node))
        elif isinstance(node, ast.Return) and node.value is not None:
            sites.append(("return_value", node))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            sites.append(("constant", node))
    return sites


def _plus_one(expr: ast.expr) -> ast.expr:
    return ast.BinOp(left=expr, op=ast.Add(), right=ast.Constant(1))


def _mutate(kind: str, node: ast.AST) -> None:
    """Apply mutation `kind` to `node` in place."""
    if kind == "swap_comparison":
        node.ops[0] = _CMP_SWAP[type(node.ops[0])]()
    elif kind == "wrong_operator":
        node.op = _BIN_SWAP[type(node.op)]()
    elif kind == "and_or":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "range_off_by_one":
        node.args[-1 if len(node.args) < 3 else 1] = _plus_one(node.args[-1 if len(node.args) < 3 else 1])
    elif kind == "slice_off_by_one":
        if node.upper is not None:
            node.upper = _plus_one(node.upper)
        else:
            node.lower = _plus_one(node.lower)
    elif kind == "return_value":
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, bool):
            node.value = ast.Constant(not value.value)
        else:
            node.value = ast.UnaryOp(op=ast.Not(), operand=value) if _looks_boolean(value) else _plus_one(value)
    elif kind == "constant":
        node.value = node.value + 1


def _looks_boolean(node: ast.expr) -> bool:
    return isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp)
                                                           and isinstance(node.op, ast.Not))


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]


def _rename_locals(tree: ast.AST, rng: random.Random) -> None:
    """Rename variables assigned inside functions (not parameters, globals, builtins or function names)."""
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | set(dir(builtins))
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        params = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
        stored = sorted({n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                        - params)
        mapping = {}
        for name in stored:
            if rng.random() < 0.5:
                options = [r for r in _RENAMES if r not in taken]
                if options:
                    mapping[name] = rng.choice(options)
                    taken.add(mapping[name])
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and n.id in mapping:
                n.id = mapping[n.id]


def render(tree: ast.AST, rng: random.Random) -> str:
    """A candidate's text: docstrings stripped, locals randomly renamed, formatted by ast.unparse."""
    tree = copy.deepcopy(tree)
    _strip_docstrings(tree)
    _rename_locals(tree, rng)
    return ast.unparse(ast.fix_missing_locations(tree))


def mutants(source: str) -> list:
    """Every single-site mutant of `source` as (kind, ast.Module), in a stable order; [] if it does not parse."""
    try:
        base = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for i, (kind, _) in enumerate(_sites(base)):
        tree = copy.deepcopy(base)
        _mutate(kind, _sites(tree)[i][1])
        try:
            compile(ast.fix_missing_locations(tree), "<mutant>", "exec")
        except (SyntaxError, ValueError):
            continue
        if ast.unparse(tree) != ast.unparse(base):
            out.append((kind, tree))
    return out


def code_candidates(source: str, k: int, error_rate: float, rng: random.Random, num_common: int = 2,
                    common_share: float = 0.8) -> list:
    """K candidate programs: the reference (re-rendered) with probability 1 - error_rate, else a mutant,
    most often one of `num_common` common mutants of this problem."""
    base = ast.parse(source)
    pool = mutants(source)
    rng.shuffle(pool)
    common = pool[:num_common]
    weights = [2.0 ** -i for i in range(len(common))]
    texts = []
    for _ in range(k):
        if not pool or rng.random() >= error_rate:
            tree = base
        elif common and rng.random() < common_share:
            tree = rng.choices(common, weights=weights)[0][1]
        else:
            tree = rng.choice(pool)[1]
        texts.append(render(tree, rng))
    return texts
