"""What a landing may not carry, read from its trees with git's own plumbing: chtop's own files, attributes that run your drivers.

The sandbox pins chtop's code and policy (and what the host runs from every checkout) read-only
in the checkout, but the agent's git store is its own: it can commit any tree there with plumbing
(``hash-object``, ``commit-tree``, ``update-ref``) and hide it from ``git status`` with index
flags.  So what lands is checked where it is: the trees of the commits, compared by git
(``diff-tree``), never the checkout or a diff the agent can shape.

Its ``.gitattributes`` files are read the same way: by git's own parser (``check-attr`` over a
scratch index of the tree, every directory's file and the root's ``[attr]`` macros included), so
that no byte the agent chooses (a NUL, a line that looks like a diff header) reads one way here
and another way where git applies it.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core.gitrun import git
from ..core.term import inert_line
from ..workspace.pins import HOST_EXECUTED, MANAGEMENT


@dataclass(frozen=True)
class Change:
    """One path a landing changes: its mode before and after (``000000``: none there)."""

    old_mode: str
    new_mode: str
    path: str


def parse_raw_diff(out: str) -> list[Change]:
    """``git diff-tree -r -z`` raw output (``:OLD NEW SHA SHA STATUS\\0PATH\\0`` per path) as Changes."""
    fields = out.split("\0")
    changes = []
    for i in range(0, len(fields) - 1, 2):
        meta, path = fields[i], fields[i + 1]
        if not meta.startswith(":"):
            break
        old_mode, new_mode = meta[1:].split(" ", 2)[:2]
        changes.append(Change(old_mode, new_mode, path))
    return changes


# how git status quotes a path it prints (quote_c_style, core.quotePath on: its default)
_C_ESCAPES = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r",
              0x22: '\\"', 0x5C: "\\\\"}


def git_quoted(path: str) -> str:
    """``path`` as ``git status --porcelain`` prints it: as it is, or in double quotes with C
    escapes (octal for control bytes and for every byte of a non-ASCII name), a space quoted too."""
    raw = path.encode("utf-8", "surrogateescape")
    if not any(b <= 0x20 or b >= 0x7F or b in (0x22, 0x5C) for b in raw):
        return path
    return '"' + "".join(_C_ESCAPES.get(b) or (f"\\{b:03o}" if b < 0x20 or b >= 0x7F else chr(b)) for b in raw) + '"'


def merge_bases(repo_dir: Path, integration: str, tip: str) -> list[str]:
    """Where ``tip`` left ``integration`` (every best common ancestor; none for unrelated histories)."""
    return git(repo_dir, ["merge-base", "--all", integration, tip], check=False).stdout.split()


def changes_since_fork(repo_dir: Path, integration: str, tip: str) -> list[Change]:
    """Every path ``tip``'s commits change since they left ``integration``, as git compares trees
    (no rename folding: a file moved away shows as its old path deleted); against each merge base,
    or against ``integration`` itself where there is none.  With one merge base (the usual case), one
    git finds it and compares (``diff-tree --merge-base``, which refuses several bases or none)."""
    one_base = git(repo_dir, ["diff-tree", "-r", "-z", "--no-renames", "--merge-base", integration, tip],
                   input=b"", check=False)
    if one_base.ok:
        return parse_raw_diff(one_base.stdout)
    seen: dict[str, Change] = {}
    for base in merge_bases(repo_dir, integration, tip) or [integration]:
        out = git(repo_dir, ["diff-tree", "-r", "-z", "--no-renames", base, tip], input=b"").stdout
        for change in parse_raw_diff(out):
            seen.setdefault(change.path, change)
    return list(seen.values())


# -- chtop's own files ---------------------------------------------------------------------------


def pinned_in_landing(paths, is_container: bool, allow_self_edit: bool) -> tuple[list[str], list[str]]:
    """(chtop's own files, what the host runs from a checkout) among ``paths``: the names the sandbox
    pins read-only at the top of the checkout (``sandbox/mounts.py``).  chtop's own files are
    the container repo's alone, and none where the user lets this landing change them
    (``allow_self_edit``); what the host runs is pinned in every repo, self-edit or not."""
    own, host_run = [], []
    for path in sorted(paths):
        top = path.split("/", 1)[0]
        if top in HOST_EXECUTED:
            host_run.append(path)
        elif is_container and top in MANAGEMENT and not allow_self_edit:
            own.append(path)
    return own, host_run


def shown(paths: list[str], most: int = 8) -> str:
    more = f" and {len(paths) - most} more" if len(paths) > most else ""
    return ", ".join(paths[:most]) + more


def pinned_path_problems(where: str, repo_dir: Path, changes: list[Change], is_container: bool,
                         allow_self_edit: bool, by_hand: str, again: str) -> list[str]:
    """Why the landing of ``changes`` into ``repo_dir`` is refused for the pinned paths it changes
    (``where``: the repo as the user knows it; ``by_hand``: the git command that lands it anyway;
    ``again``: the chtop command that lands it with chtop's own files allowed)."""
    own, host_run = pinned_in_landing([c.path for c in changes], is_container, allow_self_edit)
    problems = []
    if own:
        problems.append(f"{where}: the landing changes chtop's own files or policy ({shown(own)}), which the "
                        f"sandbox keeps read-only: the commits were made around that pin, and the toplevel would "
                        f"run them (its next inv, every worktree's next launch). Read them "
                        f"(inv git.diff --integration); if you mean them to land: {again} --allow-self-edit")
    if host_run:
        problems.append(f"{where}: the landing changes what the host runs from a checkout ({shown(host_run)}), "
                        f"which the sandbox keeps read-only even with --allow-self-edit; merge-up lands none. "
                        f"Read them, then land by hand: {by_hand}")
    return problems


def review_marks(repo_dir: Path, integration: str, tip: str, is_container: bool) -> list[str]:
    """The review's warning lines for what ``tip`` changes since it left ``integration`` (compared
    by git in ``repo_dir``, whatever the agent's index says): pinned paths, attribute files."""
    changes = changes_since_fork(repo_dir, integration, tip)
    attributes = [c.path for c in named(changes, ATTRIBUTE_FILE) + named(changes, LFS_CONFIG)]
    lines = pinned_marks(changes, is_container)
    if attributes:
        lines.append(f"!! changes attribute files ({shown(attributes)}): this review shows every file as text "
                     "whatever they say; read them, they decide how git treats the landed files")
    return lines


def pinned_marks(changes: list[Change], is_container: bool) -> list[str]:
    """The review's warning lines for the pinned paths ``changes`` touch (none when none)."""
    own, host_run = pinned_in_landing([c.path for c in changes], is_container, False)
    lines = []
    if own:
        lines.append(f"!! changes chtop's own files or policy (merge-up refuses them without "
                     f"--allow-self-edit): {shown(own)}")
    if host_run:
        lines.append(f"!! changes what the host runs from a checkout (merge-up refuses them): {shown(host_run)}")
    return lines


# -- index flags that hide a pinned path from status -------------------------------------------------


def hidden_pinned_paths(checkout_dir: Path, is_container: bool) -> list[tuple[str, str]]:
    """(path, flag) for each pinned path the checkout's index flags ``skip-worktree`` or
    ``assume-unchanged``: git status then never compares it with the file there, so a commit made
    around the pin reads as a clean tree.  ``git ls-files -v`` tags such entries ``S`` or in lower
    case."""
    names = HOST_EXECUTED + (MANAGEMENT if is_container else ())
    out = git(checkout_dir, ["ls-files", "-v", "-z", "--", *[f":(top,literal){name}" for name in names]],
              check=False, input=b"").stdout
    hidden = []
    for entry in filter(None, out.split("\0")):
        tag, _, path = entry.partition(" ")
        if tag == "S" or tag == "s":
            hidden.append((path, "skip-worktree"))
        elif tag.islower():
            hidden.append((path, "assume-unchanged"))
    return hidden


def hidden_pinned_warnings(where: str, checkout_dir: Path, is_container: bool) -> list[str]:
    """One line per pinned path whose index flag hides it from status, with the command that clears it."""
    return [f"{where}: {path} is flagged {flag} in the index, so git status does not look at it: the "
            f"agent's index may say anything about chtop's files. Clear it: git -C {checkout_dir} update-index "
            f"--no-skip-worktree --no-assume-unchanged -- {path}"
            for path, flag in hidden_pinned_paths(checkout_dir, is_container)]


# -- attributes that hand the agent's files to a program your git config names -------------------

# A filter's smudge or process runs when the toplevel checks the landed files out, a merge driver
# on a --no-ff merge, a diff driver's textconv or command when you diff there later.
DRIVER_ATTRIBUTES = ("filter", "diff", "merge")
ATTRIBUTE_FILE = ".gitattributes"
LFS_CONFIG = ".lfsconfig"
REGULAR_MODES = ("100644", "100755")


def configured_drivers(repo_dir: Path) -> set[str]:
    """``filter=NAME``, ``diff=NAME``, ``merge=NAME`` for each driver the effective git config defines."""
    out = git(repo_dir, ["config", "--name-only", "--get-regexp", r"^(filter|diff|merge)\..*\."],
              check=False).stdout
    return {f"{kind}={name}" for key in out.split() for kind, _, rest in [key.partition(".")]
            for name in [rest.rpartition(".")[0]] if kind in DRIVER_ATTRIBUTES and name}


def named(changes: list[Change], name: str) -> list[Change]:
    return [c for c in changes if c.path.rsplit("/", 1)[-1] == name]


def attribute_file_problems(where: str, repo_dir: Path, tip: str, changes: list[Change]) -> list[str]:
    """Each ``.gitattributes`` the landing writes that git would not read as plain lines of text:
    not a regular file, or holding a NUL (git's own test for binary) or a CR."""
    problems = []
    for change in named(changes, ATTRIBUTE_FILE):
        if change.new_mode == "000000":
            continue
        if change.new_mode not in REGULAR_MODES:
            why = f"is not a regular file (mode {change.new_mode})"
        else:
            text = text_at(repo_dir, tip, change.path)
            why = "holds a NUL byte (git reads it as binary)" if "\0" in text else \
                "holds a CR (\\r) byte" if "\r" in text else ""
        if why:
            problems.append(f"{where}: the landing's {change.path} {why}; merge-up lands only attribute files "
                            "of plain lines. Read it (git cat-file blob " + f"{tip}:{change.path} | cat -v), "
                            "then land by hand if you mean it")
    return problems


def tree_paths(repo_dir: Path, tree: str) -> list[str]:
    out = git(repo_dir, ["ls-tree", "-r", "-z", "--name-only", "--full-tree", tree], input=b"").stdout
    return [path for path in out.split("\0") if path]


def driver_attributes(repo_dir: Path, tree: str, paths: list[str]) -> dict[tuple[str, str], str]:
    """(path, attribute) -> value for ``filter``, ``diff`` and ``merge`` of ``paths``, as git applies
    ``tree``'s attribute files to them: ``git check-attr --cached`` over a scratch index of ``tree``
    (the real index is never touched)."""
    with tempfile.TemporaryDirectory(prefix="chtop-attr-") as scratch:
        env = {"GIT_INDEX_FILE": os.path.join(scratch, "index")}
        git(repo_dir, ["read-tree", tree], env=env)
        out = git(repo_dir, ["check-attr", "--cached", "-z", "--stdin", *DRIVER_ATTRIBUTES], env=env,
                  input="".join(f"{path}\0" for path in paths).encode()).stdout
    fields = out.split("\0")
    return {(fields[i], fields[i + 1]): fields[i + 2] for i in range(0, len(fields) - 2, 3)}


def newly_routed(repo_dir: Path, base: str, tip: str, drivers: set[str]) -> list[tuple[str, str]]:
    """(path, ``attr=NAME``) for each file of ``tip`` that ``tip``'s attribute files hand to a
    driver in ``drivers`` and ``base``'s (where it lands) do not."""
    paths = tree_paths(repo_dir, tip)
    before, after = driver_attributes(repo_dir, base, paths), driver_attributes(repo_dir, tip, paths)
    return [(path, f"{attr}={value}") for (path, attr), value in sorted(after.items())
            if f"{attr}={value}" in drivers and before.get((path, attr)) != value]


def attribute_problems(where: str, repo_dir: Path, integration: str, tip: str, changes: list[Change],
                       by_hand: str) -> list[str]:
    """Why the landing of ``tip`` on ``integration`` in ``repo_dir`` is refused for its attributes:
    an attribute file git would not read as text lines, one that hands a file to a driver your
    config defines (the agent cannot define one, but it can choose yours), a ``.lfsconfig`` while
    git-lfs is configured (its URL is where your git-lfs would fetch from, outside the proxy).
    Neither config nor trees are asked when the landing changes no attribute or lfs file."""
    attribute_files, lfs_files = named(changes, ATTRIBUTE_FILE), named(changes, LFS_CONFIG)
    if not attribute_files and not lfs_files:
        return []
    problems = attribute_file_problems(where, repo_dir, tip, changes)
    drivers = configured_drivers(repo_dir)
    if lfs_files and "filter=lfs" in drivers:
        problems.append(f"{where}: the landing changes {shown([c.path for c in lfs_files])} while git-lfs is "
                        "configured here: it would fetch from wherever the file says, outside the proxy. "
                        f"Read it, then land by hand: {by_hand}")
    readable = not problems
    if attribute_files and drivers and readable:
        for path, line, driver in driver_rules_added(repo_dir, integration, tip, attribute_files, drivers):
            problems.append(f"{where}: {path} adds `{inert_line(line)}`, which routes files through {driver}, a "
                            f"driver your git config defines; merge-up lands no attribute that runs one. Read it, "
                            f"then land by hand: {by_hand}")
    if attribute_files and drivers and readable:
        routed = newly_routed(repo_dir, integration, tip, drivers)
        if routed:
            values = ", ".join(sorted({value for _, value in routed}))
            problems.append(f"{where}: the landing's .gitattributes routes files through {values}, a driver your "
                            f"git config defines ({shown([f'{path} ({value})' for path, value in routed])}); "
                            f"merge-up lands no attribute that runs one. Read them, then land by hand: {by_hand}")
    return problems


# git's built-in macro (attr.c); every other macro is an ``[attr]`` line of the root .gitattributes
BUILTIN_MACROS = {"binary": ["-diff", "-merge", "-text"]}
MACRO_DEPTH = 16


def attribute_line_parts(line: str) -> tuple[str, list[str]] | None:
    """(pattern, attributes) of one ``.gitattributes`` line, split as git's attr.c splits it
    (leading blanks skipped, a C-quoted pattern read to its closing quote, attributes separated by
    blanks); None for a blank or comment line.  A macro definition's pattern is ``[attr]NAME``."""
    line = line.lstrip(" \t")
    if not line or line.startswith("#"):
        return None
    if line.startswith('"'):
        end, escaped = 1, False
        while end < len(line) and (escaped or line[end] != '"'):
            escaped = not escaped and line[end] == "\\"
            end += 1
        pattern, rest = line[:end + 1], line[end + 1:]
    else:
        pattern, _, rest = line.replace("\t", " ").partition(" ")
    return pattern, rest.replace("\t", " ").split()


def expanded(attributes: list[str], macros: dict[str, list[str]], depth: int = 0) -> list[str]:
    """``attributes`` with each macro set on the line replaced by what it sets, as git expands it."""
    out = []
    for attr in attributes:
        out.append(attr)
        if depth < MACRO_DEPTH and attr in macros:
            out += expanded(macros[attr], macros, depth + 1)
    return out


def macro_definitions(text: str) -> dict[str, list[str]]:
    """The ``[attr]NAME ...`` macros a root ``.gitattributes`` defines, with git's built-in ones."""
    macros = dict(BUILTIN_MACROS)
    for line in text.split("\n"):
        parts = attribute_line_parts(line)
        if parts and parts[0].startswith("[attr]"):
            macros[parts[0][len("[attr]"):]] = parts[1]
    return macros


def driver_rules_added(repo_dir: Path, integration: str, tip: str, attribute_files: list[Change],
                       drivers: set[str]) -> list[tuple[str, str, str]]:
    """(path, line, ``attr=NAME``) for each line the landing adds to a ``.gitattributes`` (or a macro
    it defines or changes) that sets a driver in ``drivers``: a rule lands whether or not a file
    matches it yet, since a later landing's files would then pass through it unasked."""
    read: dict[tuple[str, str], str] = {}

    def at(commit: str, path: str) -> str:          # each blob asked of git once (the root's is asked twice)
        if (commit, path) not in read:
            read[commit, path] = text_at(repo_dir, commit, path)
        return read[commit, path]

    macros = macro_definitions(at(tip, ATTRIBUTE_FILE))
    before_macros = macro_definitions(at(integration, ATTRIBUTE_FILE))
    found = []
    for change in attribute_files:
        if change.new_mode == "000000":
            continue
        before = set(at(integration, change.path).split("\n"))
        for line in at(tip, change.path).split("\n"):
            parts = attribute_line_parts(line)
            if parts is None:
                continue
            attributes = parts[1]
            uses_changed_macro = any(macros.get(a) != before_macros.get(a) for a in attributes if a in macros)
            if line in before and not uses_changed_macro:
                continue
            for attr in expanded(attributes, macros):
                if attr in drivers:
                    found.append((change.path, line.strip(), attr))
                    break
    return found


def text_at(repo_dir: Path, commit: str, path: str) -> str:
    """The blob at ``commit:path`` as text, every byte kept; empty where there is none (one git call)."""
    got = git(repo_dir, ["cat-file", "blob", f"{commit}:{path}"], input=b"", check=False)
    return got.stdout if got.ok else ""
