"""core/plugins.py: user code by dotted path, refused in one line naming the key; the keywords a function accepts."""
import sys
import textwrap

import pytest

from core.plugins import PluginError, call_by_path, extra_kwargs, load_object, takes_positional

USER_MODULE = '''
    THRESHOLD = 0.5

    def score(problem, candidate, response, label, **extra):
        return float(label)

    def two(a, b):
        return a + b

    def named(a, b, c, index=0, domain="math"):
        return (index, domain)

    class Judge:
        @staticmethod
        def rate(a, b, c):
            return True
'''


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    """A package `my_plugins` with a module `rewards`, importable from tmp_path."""
    package = tmp_path / "my_plugins"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rewards.py").write_text(textwrap.dedent(USER_MODULE))
    (package / "broken.py").write_text("raise RuntimeError('no judge configured')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_plugins"
    for name in [m for m in sys.modules if m.startswith("my_plugins")]:
        del sys.modules[name]


def test_a_function_by_dotted_path_loads_and_fits(user_module):
    fn = load_object("my_plugins.rewards:score", "verifier.reward.name", takes_positional(4))
    assert fn("p", "c", "r", 1) == 1.0
    assert load_object("my_plugins.rewards:Judge.rate", "data.label_function", takes_positional(3))(1, 2, 3)


@pytest.mark.parametrize("path, reason", [
    ("my_plugins.rewards", "expected 'package.module:attribute'"),
    ("my_plugins.rewards:", "expected 'package.module:attribute'"),
    ("my_plugins.nothing:score", "module 'my_plugins.nothing' does not import"),
    ("my_plugins.rewards:missing", "has no attribute 'missing'"),
    ("my_plugins.broken:score", "raised RuntimeError: no judge configured"),
    ("my_plugins.rewards:THRESHOLD", "is a float, not a callable"),
    ("my_plugins.rewards:two", "cannot be called as fn(problem, candidate, response, label)"),
])
def test_a_path_that_does_not_fit_is_one_line_naming_the_key(user_module, path, reason):
    with pytest.raises(PluginError) as err:
        load_object(path, "verifier.reward.name",
                    takes_positional(4, ("problem", "candidate", "response", "label")))
    message = str(err.value)
    assert message.startswith(f"verifier.reward.name={path!r}: ") and reason in message
    assert "\n" not in message and err.value.key == "verifier.reward.name" and err.value.reason in message


def test_the_default_check_wants_a_callable(user_module):
    assert load_object("my_plugins.rewards:two", "k")(1, 2) == 3
    with pytest.raises(PluginError, match="not a callable"):
        load_object("my_plugins.rewards:THRESHOLD", "k")


def test_extra_keywords_reach_a_function_only_where_it_takes_them(user_module):
    extras = {"index": 3, "domain": "code", "unknown": 1}
    score = load_object("my_plugins.rewards:score", "k")
    named = load_object("my_plugins.rewards:named", "k")
    assert extra_kwargs(score, (1, 2, 3, 4), extras) == extras  # **extra: all of them
    assert extra_kwargs(named, (1, 2, 3), extras) == {"index": 3, "domain": "code"}
    assert extra_kwargs(named, (1, 2, 3, 9), extras) == {"domain": "code"}  # index is bound positionally
    assert extra_kwargs(load_object("my_plugins.rewards:two", "k"), (1, 2), extras) == {}


def test_call_by_path_loads_once_and_passes_what_the_function_takes(user_module, tmp_path):
    assert call_by_path("my_plugins.rewards:named", "k", 3, (1, 2, 3), {"index": 5, "other": 0},
                        (str(tmp_path),)) == (5, "math")
    with pytest.raises(PluginError, match="cannot be called"):
        call_by_path("my_plugins.rewards:two", "k", 3, (1, 2, 3), {})
