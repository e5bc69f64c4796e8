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


_FUNCTION = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSION = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _Scope:
    """One function, lambda, class or comprehension scope: the names it binds, how, and its region of the tree.

    `stored` are names bound only by plain assignment targets (`x = ...`, `for x in`, `with ... as x`, `x += 1`,
    comprehension targets): renaming every `Name` node of them is a complete rename. `other` are names bound in
    any other way (parameters, `def`/`class`/`import`/`except ... as`/`match` captures) or declared `global` /
    `nonlocal`: never renamed, and never renamed in an enclosing scope either.
    """

    def __init__(self, node: ast.AST, parent: "_Scope | None"):
        self.node, self.parent, self.children = node, parent, []
        self.stored: set = set()
        self.other: set = set()
        self.names: list = []  # every Name node evaluated in this scope
        if parent is not None:
            parent.children.append(self)

    def function(self) -> "_Scope":
        """Where a walrus inside a comprehension binds: the nearest enclosing non-comprehension scope."""
        return self if not isinstance(self.node, _COMPREHENSION) or self.parent is None else self.parent.function()

    def binds_below(self) -> set:
        """Every name some nested scope binds or declares (a rename must not reach into those)."""
        out: set = set()
        for child in self.children:
            out |= child.stored | child.other | child.binds_below()
        return out


def _scopes(tree: ast.AST) -> _Scope:
    """The scope tree of a module, each Name node attributed to the scope it is evaluated in. Defaults,
    decorators, annotations and class bases belong to the enclosing scope, as does the first iterable of a
    comprehension; everything else inside a function, lambda, class or comprehension belongs to it."""
    root = _Scope(tree, None)

    def visit(node: ast.AST, scope: _Scope) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope.other.add(node.name)
        if isinstance(node, _FUNCTION):
            outer = list(node.decorator_list) if not isinstance(node, ast.Lambda) else []
            outer += [d for d in node.args.defaults + node.args.kw_defaults if d is not None]
            if not isinstance(node, ast.Lambda):
                outer += [a.annotation for a in _args(node.args) if a.annotation] + [node.returns] * bool(node.returns)
            for child in outer:
                visit(child, scope)
            inner = _Scope(node, scope)
            inner.other |= {a.arg for a in _args(node.args)}
            for child in (node.body if isinstance(node.body, list) else [node.body]):
                visit(child, inner)
        elif isinstance(node, ast.ClassDef):
            for child in node.decorator_list + node.bases + node.keywords:
                visit(child, scope)
            inner = _Scope(node, scope)
            for child in node.body:
                visit(child, inner)
        elif isinstance(node, _COMPREHENSION):
            visit(node.generators[0].iter, scope)
            inner = _Scope(node, scope)
            for i, gen in enumerate(node.generators):
                visit(gen.target, inner)
                if i:
                    visit(gen.iter, inner)
                for cond in gen.ifs:
                    visit(cond, inner)
            for part in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
                visit(part, inner)
        elif isinstance(node, ast.NamedExpr):
            visit(node.value, scope)
            target = scope.function()
            target.other.add(node.target.id)  # never renamed: it may be read outside the comprehension
            scope.other.add(node.target.id)
            target.names.append(node.target)
        elif isinstance(node, ast.Name):
            scope.names.append(node)
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                scope.stored.add(node.id)
        else:
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                scope.other.update(node.names)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                scope.other.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                scope.other.add(node.name)
            elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
                scope.other.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                scope.other.add(node.rest)
            for child in ast.iter_child_nodes(node):
                visit(child, scope)

    for child in ast.iter_child_nodes(tree):
        visit(child, root)
    return root


def _args(args: ast.arguments) -> list:
    return args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]


def _walk(scope: _Scope):
    yield scope
    for child in scope.children:
        yield from _walk(child)


def _rename_locals(tree: ast.AST, rng: random.Random) -> None:
    """Randomly rename local variables of functions and comprehensions, respecting Python's scopes.

    A name is renamed in the scope that binds it, only when it is bound there by plain assignment alone and no
    nested scope rebinds or declares it; then every use in that scope and in nested scopes (where it is a free
    variable) refers to that one binding, and all of them are renamed. Parameters, globals, builtins and names
    bound by def/class/import/except/match/walrus are kept. New names appear nowhere else in the module.
    """
    root = _scopes(tree)
    taken = set(dir(builtins)) | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)} | {
        getattr(n, "name", None) for n in ast.walk(tree)} | {
        (a.asname or a.name).split(".")[0] for a in ast.walk(tree) if isinstance(a, ast.alias)}
    for scope in _walk(root):
        if scope is root or isinstance(scope.node, ast.ClassDef):
            continue  # module and class attributes are visible from outside: never renamed
        below = scope.binds_below()
        for name in sorted(scope.stored - scope.other - below):
            options = [r for r in _RENAMES if r not in taken]
            if rng.random() >= 0.5 or not options:
                continue
            new = rng.choice(options)
            taken.add(new)
            for inner in _walk(scope):
                for node in inner.names:
                    if node.id == name:
                        node.id = new


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
