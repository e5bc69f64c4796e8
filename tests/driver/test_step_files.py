"""The files one training step visits, as driver/train.py's docstring names them, stay true: the loop calls one step
module and the run's lifecycle only, and every actor method the step module calls is defined in a named file."""
import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEP_FILES = ["driver/train.py", "driver/step.py", "actors/rollout/rollout_worker.py",
              "actors/verifier/verifier_pool.py", "actors/learner/learner.py", "actors/weight_sync/coordinator.py"]
SYNC_PARTS = {"actors/weight_sync/object_store.py", "actors/weight_sync/engine_update.py"}  # stage 6's transport
LIFECYCLE = {"cfg", "fleet", "collector", "extra_rows", "record_step", "should_evaluate", "evaluate", "checkpoint",
             "should_export", "export"}


def _tree(path: str) -> ast.Module:
    return ast.parse((REPO / path).read_text())


def _defined_methods(path: str) -> set:
    return {n.name for n in ast.walk(_tree(path)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_loops_docstring_names_the_six_files_a_step_visits():
    doc = ast.get_docstring(_tree("driver/train.py"))
    sentence = doc[doc.index("The six files a step visits"):]
    sentence = sentence[:sentence.index("The actors' handles")]
    named = re.findall(r"(?:driver|actors)/[\w/]+\.py", sentence)
    assert [f for f in named if f not in SYNC_PARTS] == STEP_FILES
    assert all((REPO / f).is_file() for f in named)


def test_the_loop_imports_only_the_step_module_and_calls_only_the_runs_lifecycle():
    loop = next(n for n in ast.walk(_tree("driver/train.py")) if isinstance(n, ast.FunctionDef)
                and n.name == "train_loop")
    imports = {n.module for n in ast.walk(loop) if isinstance(n, ast.ImportFrom)}
    assert imports == {"driver.step"}
    used = {n.attr for n in ast.walk(loop) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "run"}
    assert used <= LIFECYCLE, used - LIFECYCLE


def test_every_actor_method_the_step_module_calls_is_in_a_named_actor_file():
    step = _tree("driver/step.py")
    remote = {n.value.attr for n in ast.walk(step) if isinstance(n, ast.Attribute) and n.attr == "remote"
              and isinstance(n.value, ast.Attribute)}
    assert {"generate", "score_groups", "train_step", "compute_logprobs", "abort"} <= remote
    defined = set().union(*(_defined_methods(f) for f in STEP_FILES[2:]))
    assert remote <= defined, remote - defined
    assert "sync" in _defined_methods("actors/weight_sync/coordinator.py")  # stage 6: fleet.broadcaster.sync


def test_the_step_module_imports_no_other_stage_code():
    """driver/step.py's repository imports: core's pure pieces (packing, the algorithms, the estimator), the
    curriculum's gain, RunFailed, and the sync check (every weight_sync.check_every syncs); nothing of the run, the
    fleet or the tiny recipe."""
    imported = {n.module for n in ast.walk(_tree("driver/step.py")) if isinstance(n, ast.ImportFrom)}
    own = {m for m in imported if m.split(".")[0] in ("actors", "core", "driver", "tiny_recipe", "cluster")}
    assert own == {"core.packing", "core.algo", "core.algo.metrics", "core.estimators", "core.records",
                   "driver.curriculum", "driver.failure", "driver.sync_check"}


def _repository_imports(path: str) -> set:
    """The repository files `path` imports (lazy imports inside functions included) or names as a dotted string for
    another library to load (vLLM's worker extension), as paths."""
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[\w.]+", node.value):
            names = [node.value.rsplit(".", 1)[0]]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {f"{name.replace('.', '/')}.py" for name in names if (REPO / f"{name.replace('.', '/')}.py").is_file()}
    return found


def test_the_readmes_list_of_the_files_a_step_opens_names_only_files_the_step_reaches():
    """README's paragraph on one step's code: the six files in order, then what following their calls opens; every
    file it names exists and is imported, directly or through others, by the six."""
    text = (REPO / "README.md").read_text()
    paragraph = text[text.index("One step's code"):text.index("The embedded tiny model's own pieces")]
    named = re.findall(r"(?:core|driver|actors)/[\w/]+\.py", paragraph)
    assert named[:len(STEP_FILES)] == STEP_FILES
    reached, todo = set(), list(STEP_FILES)
    while todo:
        path = todo.pop()
        if path not in reached:
            reached.add(path)
            todo += sorted(_repository_imports(path) - reached)
    assert not set(named) - reached, set(named) - reached
