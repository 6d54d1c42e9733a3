"""Dotfiles rendered from dotfile_templates/ (Jinja2), and git excludes.

Each template ``dotfile_templates/X.j2`` becomes ``<root>/X``; a file is
written only when its content changes.  The sub-repo dirs of the manifest
are added to the container repo's shared ``info/exclude``, so a fresh
workspace shows clean whatever repos the manifest names.
"""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATE_DIR = "dotfile_templates"
SUFFIX = ".j2"
EXCLUDE_BEGIN = "# >>> chtop: managed, do not edit this block >>>"
EXCLUDE_END = "# <<< chtop <<<"
# Always excluded, whatever .gitignore says: chtop writes these in every checkout.
ALWAYS_EXCLUDED = ("/.venv/", "/.envrc", "/.claude/env.sh")
# What chtop's venv build leaves in each repo it installs (editable metadata, bytecode of the smoke
# imports), excluded in each repo's shared store so that delete and rebase-down do not see them.
BUILD_LEFTOVERS = ("*.egg-info/", "__pycache__/")


def template_files(template_root: Path) -> list[Path]:
    return sorted(p for p in template_root.rglob("*" + SUFFIX) if p.is_file())


# ``{{ name }}``: the only markup the shipped templates use, rendered without importing Jinja
PLAIN_SUBSTITUTION = re.compile(r"\{\{ ?([A-Za-z_][A-Za-z0-9_]*) ?\}\}")
JINJA_MARKUP = ("{{", "}}", "{%", "%}", "{#", "#}", "\r")
JINJA_WORDS = frozenset({"true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is",
                         "if", "else"})     # literals and operators: not a context lookup in Jinja


def render_text(template_path: Path, context: dict) -> str:
    source = template_path.read_text()
    plain = render_plain(source, context)
    return plain if plain is not None else render_jinja(source, context)


def render_plain(source: str, context: dict) -> str | None:
    """``source`` rendered as Jinja would, when its only markup is ``{{ name }}`` of names in
    ``context`` (each becomes ``str(value)``); None for anything else, which Jinja renders (so a
    plain template needs no Jinja import or compile)."""
    if any(mark in PLAIN_SUBSTITUTION.sub("", source) for mark in JINJA_MARKUP):
        return None
    if not all(name in context and name not in JINJA_WORDS for name in PLAIN_SUBSTITUTION.findall(source)):
        return None           # Jinja's StrictUndefined says which
    return PLAIN_SUBSTITUTION.sub(lambda found: str(context[found[1]]), source)


def render_jinja(source: str, context: dict) -> str:
    import jinja2  # here, not at the top: every `inv` start would pay for it

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(source).render(**context)


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` unless it already holds it; True if written."""
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".chtop-tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True


def render_dotfiles(root: Path, context: dict | None = None) -> list[Path]:
    """Render ``root/dotfile_templates/**.j2`` into ``root``; return what changed."""
    root = Path(root)
    template_root = root / TEMPLATE_DIR
    context = {"root": str(root), **(context or {})}
    changed = []
    for template in template_files(template_root):
        target = root / template.relative_to(template_root).with_suffix("")
        if write_if_changed(target, render_text(template, context)):
            changed.append(target)
    return changed


def exclude_lines(repo_names) -> list[str]:
    return [f"/{name}/" for name in repo_names] + list(ALWAYS_EXCLUDED) + list(BUILD_LEFTOVERS)


def merge_exclude_block(text: str, lines: list[str]) -> str:
    """``text`` with chtop's managed block holding ``lines`` plus what it held."""
    before, block, after = text, [], ""
    if EXCLUDE_BEGIN in text and EXCLUDE_END in text:
        before, rest = text.split(EXCLUDE_BEGIN, 1)
        block_text, after = rest.split(EXCLUDE_END, 1)
        block = [line for line in block_text.splitlines() if line.strip()]
    merged = block + [line for line in lines if line not in block]
    if before and not before.endswith("\n"):
        before += "\n"
    return before + EXCLUDE_BEGIN + "\n" + "\n".join(merged) + "\n" + EXCLUDE_END + after.rstrip("\n") + "\n"


def ensure_exclude_block(store: Path, lines: list[str]) -> bool:
    """chtop's managed block in ``store/info/exclude`` holds ``lines``; True if the file changed.

    ``store`` is a repo's shared git dir: its ``info/exclude`` applies to all its worktrees.
    """
    path = Path(store) / "info" / "exclude"
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    return write_if_changed(path, merge_exclude_block(text, lines))


def ensure_excludes(store: Path, repo_names) -> bool:
    """Make the container repo ignore the sub-repo dirs (and chtop's own files) in every worktree."""
    return ensure_exclude_block(store, exclude_lines(repo_names))


def ensure_repo_excludes(ws) -> list[Path]:
    """Each cloned manifest repo ignores what the venv build leaves in it; the excludes that changed."""
    changed = []
    for repo in ws.manifest.names:
        store = ws.toplevel / repo / ".git"
        if store.is_dir() and not store.is_symlink() and ensure_exclude_block(store, list(BUILD_LEFTOVERS)):
            changed.append(store / "info" / "exclude")
    return changed


def refresh_workspace_files(ws) -> list[Path]:
    """Dotfiles and excludes for one checkout; what changed, for the caller to say."""
    changed = render_dotfiles(ws.root)
    if ensure_excludes(ws.toplevel / ".git", ws.manifest.names):
        changed.append(ws.toplevel / ".git" / "info" / "exclude")
    return changed + ensure_repo_excludes(ws)
