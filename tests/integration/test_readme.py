"""The docs hold: every task `inv --list` shows is documented in docs/tasks.md, the README stays a newcomer's
page (short, its quick start the real one), and README and docs/ keep to their form (line width, no internal
tracker numbers)."""

import re
import subprocess
import sys

from conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
TASKS_DOC = REPO_ROOT / "docs" / "tasks.md"
README_MAX_LINES = 400
MAX_WIDTH = 120
QUICK_START = ["./bootstrap && inv demo",                                         # as root
               './bootstrap && export PATH="$HOME/.local/bin:$PATH" && inv demo']  # as an ordinary user


def listed_tasks() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "invoke", "--list", "--list-format", "flat"], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [m.group(1) for line in out.splitlines() if (m := re.match(r"^  (\S+)", line))]


def doc_pages() -> list:
    pages = [README, REPO_ROOT / "CONTRIBUTING.md", REPO_ROOT / "bench" / "BENCHMARKS.md",
             *sorted((REPO_ROOT / "docs").glob("*.md"))]
    assert TASKS_DOC in pages
    return pages


def prose_lines(text: str):
    """(line number, line) of every line outside fenced code blocks and tables."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced and not line.lstrip().startswith("|"):
            yield number, line


def test_every_task_is_documented_with_an_example():
    tasks_doc = TASKS_DOC.read_text()
    tasks = listed_tasks()
    assert len(tasks) >= 20
    missing = [t for t in tasks if not re.search(rf"inv {re.escape(t)}\b", tasks_doc)]
    assert missing == [], f"tasks missing from {TASKS_DOC.relative_to(REPO_ROOT)}: {missing}"


def test_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference material into docs/"


def test_no_prose_line_is_wider_than_120_characters():
    wide = [f"{page.relative_to(REPO_ROOT)}:{n}: {len(line)} characters"
            for page in doc_pages() for n, line in prose_lines(page.read_text()) if len(line) > MAX_WIDTH]
    assert wide == []


def test_no_internal_tracker_or_iteration_numbers():
    pattern = re.compile(r"\b(stop|stops|issue|issues|iteration)\s+#?\d+\b|\bstop\s+\d+'s\b", re.IGNORECASE)
    found = [f"{page.relative_to(REPO_ROOT)}:{n}: {m.group(0)!r}"
             for page in doc_pages() for n, line in enumerate(page.read_text().splitlines(), 1)
             for m in pattern.finditer(line)]
    assert found == []


def test_quick_start_is_one_line_for_root_and_one_for_an_ordinary_user_and_ci_runs_the_tests():
    block = README.read_text().split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == QUICK_START
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "./bootstrap" in ci and "nox -s tests" in ci


def test_every_link_into_the_docs_names_a_file_that_exists():
    broken = []
    for page in doc_pages():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"[a-z]+://", target) and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target}")
    assert broken == []
