"""The paths one commit changes against another, read from the host's store with no git process:
``git diff --name-only BASE TIP`` where both commits' trees are there as data, loose or in a pack
(``packread``).

merge-up asks, per repo that lands, which paths the feature changes (``gitops.landing_paths``): the
toplevel checkout's uncommitted or untracked files there would stop the merge, and a
``.gitattributes`` among them is checked for drivers.  After an import the feature's new trees are
loose objects of the toplevel's store; the integration tip's are loose when it came from an
earlier merge-up or a commit made there, else (a fresh clone, a fetch, a ``gc``) in a pack.  Where
every tree the diff must open is read so, the paths are read here; anything else -- a tree neither
reads, a name git would quote (``core.quotePath``), more than ``MAX_TREES`` trees -- is None, and
git is asked.  A rename is its two paths (git's ``--name-only`` shows only the new one): the merge
changes both, so the checks mind both.
"""

from __future__ import annotations

from pathlib import Path

from .loosepack import TREE_MODE, tree_items
from .packread import read_object

MAX_TREES = 200


def changed_paths(store: Path, base: str, tip: str) -> set[str] | None:
    """The paths commit ``tip`` changes against commit ``base`` (both commits of ``store``)."""
    trees = [commit_tree(store, sha) for sha in (base, tip)]
    if None in trees:
        return None
    found: set[str] = set()
    budget = [MAX_TREES]
    return found if diff_trees(store, trees[0], trees[1], "", found, budget) else None


def commit_tree(store: Path, sha: str) -> str | None:
    obj = read_object(store, sha)
    if obj is None or obj[0] != b"commit" or not obj[1].startswith(b"tree "):
        return None
    tree = obj[1][5:45].decode("ascii", "replace")
    return tree if len(tree) == 40 else None


def entries_of(store: Path, tree: str, budget: list[int]) -> dict[bytes, tuple[bytes, str]] | None:
    budget[0] -= 1
    obj = read_object(store, tree) if budget[0] >= 0 else None
    items = tree_items(obj[1]) if obj is not None and obj[0] == b"tree" else None
    return None if items is None else {name: (mode, sha) for mode, name, sha in items}


def plain_name(name: bytes) -> str | None:
    """``name`` as git prints it unquoted, or None when git would quote it."""
    if not name or any(byte < 0x20 or byte > 0x7E or byte in b'"\\\\' for byte in name):
        return None
    return name.decode("ascii")


def diff_trees(store: Path, old: str | None, new: str | None, prefix: str, found: set[str],
               budget: list[int]) -> bool:
    """Add to ``found`` every file path under ``prefix`` that differs between trees ``old`` and
    ``new`` (None: no tree there); False when a tree cannot be read or a name is one git quotes."""
    if old == new:
        return True
    before = entries_of(store, old, budget) if old else {}
    after = entries_of(store, new, budget) if new else {}
    if before is None or after is None:
        return False
    for name in before.keys() | after.keys():
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        plain = plain_name(name)
        if plain is None:
            return False
        path = prefix + plain
        old_tree = was[1] if was and was[0] == TREE_MODE else None
        new_tree = now[1] if now and now[0] == TREE_MODE else None
        if (was and not old_tree) or (now and not new_tree):
            found.add(path)                 # a file, link or submodule here changed
        if (old_tree or new_tree) and not diff_trees(store, old_tree, new_tree, path + "/", found, budget):
            return False
    return True

