"""The sandbox's global git config: your identity and a few preferences, nothing that can hold a secret.

Your own ``~/.gitconfig`` and ``~/.config/git/`` are never mounted: they hold credential helpers
and stores (``~/.config/git/credentials`` keeps tokens in clear), ``http.extraHeader``,
token-bearing ``url.*.insteadOf`` rules and includes.  Each launch writes this file instead (from
the host's git config, read by the host) and points ``GIT_CONFIG_GLOBAL`` at it; the policy
mounts ``~/.config/git/ignore`` and ``attributes``, which git reads on its own.
"""

from __future__ import annotations

# keys copied when the host's git config sets them (lower-case, as ``git config --get-regexp`` prints)
IDENTITY_KEYS = ("user.name", "user.email")
PREFERENCE_KEYS = (
    "init.defaultbranch", "core.autocrlf", "core.eol", "core.quotepath", "pull.rebase", "pull.ff",
    "merge.conflictstyle", "rebase.autostash", "rebase.autosquash", "rebase.updaterefs", "diff.algorithm",
    "diff.colormoved", "push.default", "rerere.enabled", "color.ui", "status.showuntrackedfiles",
    "branch.sort", "tag.sort", "log.date", "commit.verbose",
)
COPIED_KEYS = IDENTITY_KEYS + PREFERENCE_KEYS
# what `git config --get-regexp` is asked for (one call at launch)
COPIED_KEYS_RE = "^(" + "|".join(k.replace(".", r"\.") for k in COPIED_KEYS) + ")$"
# no signing key is inside: a host `commit.gpgSign = true` would make every commit fail
FIXED = (("commit.gpgsign", "false"), ("tag.gpgsign", "false"))
HEADER = ("# chtop: this sandbox's global git config, written at launch from the host's.\n"
          "# Identity and preferences only: no credential helpers, http headers, url rewrites or includes.\n")


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def sandbox_gitconfig(host_values: dict[str, str]) -> str:
    """The file's text from the host's values of ``COPIED_KEYS`` (others are ignored)."""
    sections: dict[str, list[str]] = {}
    items = [(k, v) for k, v in host_values.items() if k in COPIED_KEYS] + list(FIXED)
    for key, value in items:
        section, _, name = key.partition(".")
        sections.setdefault(section, []).append(f"\t{name} = {_quoted(value)}\n")
    return HEADER + "".join(f"[{section}]\n" + "".join(lines) for section, lines in sections.items())
