"""The tracked tree speaks to its users: no development-log words, nothing outside the repository, and every
command, script, config and link that the docs name exists.

- No session or issue number (the word, singular or plural, in any case, then a number, with or without "#") in any
  tracked text file or path: the reason and its figure belong there, and the history of how a choice was made is in
  git (tag `notebook-archive`).
  Another project's tracker is cited as owner/repo#N, which this does not match.
- No path outside the checkout: `../shared` (notes beside a developer's checkout that a user does not have) or the
  development machines' workspace folder (`OUTSIDE_PATHS`; a clone may live anywhere, /tmp included, so its parent
  folder is not checked).
- BENCHMARKS.md's commands name scripts, modules, configs and result files that exist, so each figure can be
  reproduced on this tree.
- Relative links in the README and docs/ point to files, and headings, that exist.
"""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROCESS_WORDS = re.compile(r"\b(sessions?|issues?)\s*#?\s*[0-9]", re.IGNORECASE)
SESSION_FOLDER = re.compile(r"(^|/)(s[0-9]{1,2}|probes-session[0-9]*)([-_/]|$)")
OUTSIDE_PATHS = re.compile(r"\.\./shared\b|(?<![\w.])/work/")


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def _text(path: str) -> str | None:
    data = (ROOT / path).read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _offending_lines(pattern: re.Pattern) -> list[str]:
    found = []
    for path in _tracked_files():
        text = _text(path)
        for number, line in enumerate(text.splitlines() if text else [], 1):
            if pattern.search(line):
                found.append(f"{path}:{number}: {line.strip()[:120]}")
    return found


def test_no_session_or_issue_numbers_in_tracked_text():
    found = _offending_lines(PROCESS_WORDS)
    assert not found, "development-log words (write the reason and its figure instead):\n" + "\n".join(found)


def test_no_file_or_folder_named_after_a_session():
    named = [p for p in _tracked_files() if PROCESS_WORDS.search(p) or SESSION_FOLDER.search(p)]
    assert not named, "paths named after development sessions:\n" + "\n".join(named)


def test_no_path_outside_the_repository():
    found = [line for line in _offending_lines(OUTSIDE_PATHS) if not line.startswith("tests/test_repository_text.py:")]
    assert not found, "paths outside the checkout:\n" + "\n".join(found)


def _benchmarks_text() -> str:
    path = ROOT / "BENCHMARKS.md"
    assert path.exists(), "BENCHMARKS.md is missing"
    return path.read_text()


def test_benchmarks_commands_name_scripts_and_configs_that_exist():
    text = _benchmarks_text()
    missing = []
    for script in sorted(set(re.findall(r"\bbenchmarks/[\w/]+\.py\b", text))):
        missing += [script] if not (ROOT / script).is_file() else []
    for config in sorted(set(re.findall(r"\bconfigs/[\w/]+\.yaml\b", text))):
        missing += [config] if not (ROOT / config).is_file() else []
    for module in sorted(set(re.findall(r"python3? -m ((?:driver|benchmarks|cluster|scripts)(?:\.\w+)+)", text))):
        path = ROOT / module.replace(".", "/")
        missing += [module] if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()) else []
    for name in sorted(set(re.findall(r"python3? -m driver\.train ([A-Za-z_]\w*)\b(?![=.])", text))):
        missing += [f"configs/{name}.yaml"] if not (ROOT / "configs" / f"{name}.yaml").is_file() else []
    assert not missing, "BENCHMARKS.md names what the tree does not have:\n" + "\n".join(missing)


def test_benchmarks_result_files_exist():
    cited = set(re.findall(r"\bbenchmarks/results/[\w./-]*\w", _benchmarks_text()))
    missing = sorted(p for p in cited if not (ROOT / p).exists())
    assert not missing, "BENCHMARKS.md cites result files that are not in the tree:\n" + "\n".join(missing)


def _markdown_pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a markdown page: lower case, punctuation dropped, spaces to hyphens, a repeated
    heading numbered -1, -2, ... (headings inside fenced code blocks are not headings)."""
    anchors, seen, fenced = set(), {}, False
    for line in page.read_text().splitlines():
        fenced ^= bool(re.match(r" {0,3}```[^`]*$", line))  # a fence line (CommonMark: no backtick after it)
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("page", _markdown_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_and_headings_that_exist(page):
    if not page.exists():
        pytest.skip(f"{page.name} is not in the tree")
    broken = set()
    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = page.parent / path if path else page
        if not target.exists():
            broken.add(link)
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.add(link)
    assert not broken, f"{page.relative_to(ROOT)} links to missing files or headings: {sorted(broken)}"
