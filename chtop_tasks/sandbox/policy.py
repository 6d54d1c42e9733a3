"""The sandbox/ policy files: parsed at every launch, pure functions.

fs-allow.txt    ``ro PATH`` or ``rw PATH`` per line; ``~``, ``$HOME`` and
                ``$CH`` (the grouping dir) expand; globs expand; paths that
                do not exist are skipped.  Nothing else is mounted
                (default-deny).  A missing file refuses the launch.
devices.txt     one path or glob per line; only existing character devices
                are passed (``--device``), anything else is skipped.  Every
                sandbox of the group gets them at once (devices are shared,
                e.g. several agents on one GPU).  A worktree's own
                ``worktrees/<name>/devices.txt`` narrows its sandbox to the
                group's devices it names (``/dev/nvidia0`` plus the control
                nodes: GPU 0 only); it never adds one the group lacks.
env-allow.txt   one variable name per line (a trailing ``*`` matches a
                prefix, e.g. ``LC_*``); forwarded from the launching shell.
                Structural names chtop sets itself are ignored with a
                warning; invalid names are skipped with a warning.

Everywhere: ``#`` starts a comment, blank lines are ignored.  A malformed
line is an error naming the file and line.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import PolicyError

FS_ALLOW = "fs-allow.txt"
DEVICES = "devices.txt"
ENV_ALLOW = "env-allow.txt"

MODES = ("ro", "rw")

# Set by chtop itself; an env-allow line naming one is ignored (with a warning).
STRUCTURAL_ENV = frozenset({
    "HOME", "PATH", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "HOSTNAME", "container",
    "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONSAFEPATH", "PYTHONPATH", "PYTHONHOME",
    "CLAUDE_CONFIG_DIR", "CLAUDE_ENV_FILE", "IS_SANDBOX",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "all_proxy", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
    "GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM",
    "LD_PRELOAD", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
    "XDG_RUNTIME_DIR", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS",
    "CHTOP_SANDBOX",
})

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")
_VAR = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class FsRule:
    """One fs-allow line after expansion: ``mode`` for every path it matched."""

    mode: str
    pattern: str          # as written
    paths: tuple[Path, ...]
    where: str            # "file:line"


@dataclass
class SandboxPolicy:
    fs: list[FsRule] = field(default_factory=list)
    devices: list[Path] = field(default_factory=list)
    env_names: list[str] = field(default_factory=list)   # names or prefix patterns ("LC_*")
    warnings: list[str] = field(default_factory=list)

    def env_from(self, environ: dict[str, str]) -> dict[str, str]:
        """The allowlisted variables present in ``environ`` (never structural ones)."""
        names, prefixes, patterns = env_matchers(self.env_names)
        out = {}
        for key in sorted(environ):
            if key in STRUCTURAL_ENV:
                continue
            if key in names or key.startswith(prefixes) or any(fnmatch.fnmatchcase(key, p) for p in patterns):
                out[key] = environ[key]
        return out


GLOB_CHARS = frozenset("*?[")


def env_matchers(patterns: list[str]) -> tuple[set[str], tuple[str, ...], list[str]]:
    """``fnmatchcase``'s answers for the env allowlist, split for speed: the plain names, the
    prefixes (``LC_*``), and the rest (left to fnmatch, which compiles a regex per pattern in each
    process)."""
    names, prefixes, rest = set(), [], []
    for pattern in patterns:
        if not GLOB_CHARS & set(pattern):
            names.add(pattern)
        elif pattern.endswith("*") and not GLOB_CHARS & set(pattern[:-1]):
            prefixes.append(pattern[:-1])
        else:
            rest.append(pattern)
    return names, tuple(prefixes), rest


def _lines(path: Path):
    """(line number, content without comment) for every non-blank line."""
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if text:
            yield number, text


def expand_path(text: str, where: str, home: Path, ch: Path | None) -> str:
    """``~``, ``$HOME``/``${HOME}`` and ``$CH``/``${CH}``; anything else is an error."""
    if text == "~" or text.startswith("~/"):
        text = str(home) + text[1:]
    elif text.startswith("~"):
        raise PolicyError(f"{where}: '~user' paths are not supported: {text}")

    def sub(match):
        name = match.group(1).strip("{}")
        if name == "HOME":
            return str(home)
        if name == "CH":
            if ch is None:
                raise PolicyError(f"{where}: $CH is not defined here (no grouping dir in --dir mode)")
            return str(ch)
        raise PolicyError(f"{where}: unknown variable ${name} (only ~, $HOME and $CH expand)")

    text = _VAR.sub(sub, text)
    if not text.startswith("/"):
        raise PolicyError(f"{where}: path must be absolute after expansion: {text}")
    return os.path.normpath(text)


def parse_fs_allow(path: Path, home: Path, ch: Path | None) -> list[FsRule]:
    if not path.is_file():
        raise PolicyError(
            f"{path} is missing: the sandbox mounts only what it allows, so it refuses to launch without it.\n"
            f"Restore it (e.g. `git -C {path.parent.parent} checkout -- sandbox/{FS_ALLOW}`)."
        )
    rules = []
    for number, text in _lines(path):
        where = f"{path}:{number}"
        parts = text.split(None, 1)
        if len(parts) != 2 or parts[0] not in MODES:
            raise PolicyError(f"{where}: expected 'ro PATH' or 'rw PATH', got: {text}")
        mode, pattern = parts[0], parts[1].strip()
        if any(c.isspace() for c in pattern):
            raise PolicyError(f"{where}: one path per line (no spaces): {text}")
        expanded = expand_path(pattern, where, home, ch)
        if glob.has_magic(expanded):
            found = tuple(Path(p) for p in sorted(glob.glob(expanded)))
        else:
            found = (Path(expanded),) if os.path.lexists(expanded) else ()
        found = tuple(p for p in found if p.exists())
        rules.append(FsRule(mode, pattern, found, where))
    return rules


# home paths that hold credentials where users keep them (a warning at launch if fs-allow mounts one)
SECRET_HOME_PATHS = {
    ".gitconfig": "git's credential helpers, http.extraHeader and token URLs",
    ".config/git": "git's credential store (credentials) and config",
    ".git-credentials": "git's credential store",
    ".bashrc": "exported API keys and tokens", ".profile": "exported API keys and tokens",
    ".bash_profile": "exported API keys and tokens", ".zshrc": "exported API keys and tokens",
    ".netrc": "passwords", ".ssh": "keys", ".aws": "cloud credentials", ".docker": "registry tokens",
    ".config/gh": "the GitHub CLI's token", ".npmrc": "registry tokens", ".pypirc": "upload tokens",
}
NO_SECRET_INSIDE = (".config/git/ignore", ".config/git/attributes")   # what git reads there besides config


def secret_warnings(rules: list[FsRule], home: Path) -> list[str]:
    """One warning per fs-allow path that is, or contains, a home path known to hold credentials."""
    out = []
    for rule in rules:
        for path in rule.paths:
            for rel, what in SECRET_HOME_PATHS.items():
                known = home / rel
                below = path.is_relative_to(known) and path not in {home / p for p in NO_SECRET_INSIDE}
                if path == known or known.is_relative_to(path) or below:
                    if os.path.lexists(known):
                        out.append(f"{rule.where}: {path} is mounted, and {known} can hold {what}: the agent can "
                                   "read them.  Remove the line (the sandbox has its own git config and shell rc)")
                    break
    return out


def parse_devices(path: Path) -> tuple[list[Path], list[str]]:
    """Existing character devices matching the lines; a missing file means none."""
    if not path.is_file():
        return [], []
    devices: list[Path] = []
    warnings: list[str] = []
    for number, text in _lines(path):
        where = f"{path}:{number}"
        if any(c.isspace() for c in text) or not text.startswith("/"):
            raise PolicyError(f"{where}: expected one absolute device path or glob, got: {text}")
        matches = sorted(glob.glob(text)) if glob.has_magic(text) else [text]
        for match in matches:
            try:
                mode = os.stat(match).st_mode
            except OSError:
                continue
            if stat.S_ISCHR(mode):
                if Path(match) not in devices:
                    devices.append(Path(match))
            elif not glob.has_magic(text):
                warnings.append(f"{where}: {match} is not a character device; skipped")
    return devices, warnings


def parse_env_allow(path: Path) -> tuple[list[str], list[str]]:
    """(names, warnings); a missing file forwards nothing."""
    if not path.is_file():
        return [], []
    names: list[str] = []
    warnings: list[str] = []
    for number, text in _lines(path):
        where = f"{path}:{number}"
        if len(text.split()) != 1:
            raise PolicyError(f"{where}: expected one variable name per line, got: {text}")
        if not _NAME.match(text):
            warnings.append(f"{where}: '{text}' is not a valid variable name; skipped")
            continue
        if text in STRUCTURAL_ENV:
            warnings.append(f"{where}: {text} is set by chtop itself (structural); ignored")
            continue
        if text not in names:
            names.append(text)
    return names, warnings


def narrow_devices(devices: list[Path], path: Path) -> tuple[list[Path], list[str]]:
    """Keep the ``devices`` that the worktree layer ``path`` names (a missing layer keeps all)."""
    if not path.is_file():
        return devices, []
    wanted, warnings = parse_devices(path)
    group = set(devices)
    for number, text in _lines(path):
        matches = sorted(glob.glob(text)) if glob.has_magic(text) else [text]
        for match in matches:
            if Path(match) not in group and os.path.exists(match):
                warnings.append(f"{path}:{number}: {match} is not in the group's {DEVICES}; a worktree's list "
                                "only narrows it, skipped")
    return [d for d in devices if d in set(wanted)], warnings


def load_policy(policy_dir: Path, home: Path, ch: Path | None, worktree: str | None = None) -> SandboxPolicy:
    """Read all three files from ``policy_dir`` (raises PolicyError); with ``worktree``, its
    ``worktrees/<name>/devices.txt`` narrows the devices."""
    policy_dir = Path(policy_dir)
    fs = parse_fs_allow(policy_dir / FS_ALLOW, home, ch)
    devices, dev_warnings = parse_devices(policy_dir / DEVICES)
    if worktree is not None:
        devices, narrow_warnings = narrow_devices(devices, policy_dir / "worktrees" / worktree / DEVICES)
        dev_warnings += narrow_warnings
    names, env_warnings = parse_env_allow(policy_dir / ENV_ALLOW)
    return SandboxPolicy(fs, devices, names, secret_warnings(fs, home) + dev_warnings + env_warnings)
