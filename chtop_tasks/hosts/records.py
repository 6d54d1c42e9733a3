"""The hosts chtop knows: ``<config>/hosts.toml`` next to ``config.toml``, one table per host.

```toml
[host.gpu1]
target = "gpu1"          # anything ssh accepts: an alias of ~/.ssh/config, user@host, ...
toplevel = "ch/top"      # the toplevel there, in its grouping dir (relative: to the login dir)
python = "/usr/bin/python3"   # the python there that runs chtop (bootstrap's venv, or --python)
worktrees = ["dev"]      # the worktrees there, as chtop last saw them (so a name alone finds its host)
```
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import atomic
from ..core.errors import UsageError
from ..core.places import read_toml, user_config_dir, worktree_name_problem

HOSTS_NAME = "hosts.toml"
LOCAL = "local"                      # the host column's name for this machine: no host may take it
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
_TARGET = re.compile(r"^[A-Za-z0-9_.@%\[\]:-]{1,255}$")
_PATH = re.compile(r"^[A-Za-z0-9_./+-]{1,255}$")
_WRITING = threading.RLock()          # several hosts' answers are recorded at once (a listing's threads)


@dataclass(frozen=True)
class Host:
    name: str
    target: str
    toplevel: str
    python: str


def hosts_path() -> Path:
    return user_config_dir() / HOSTS_NAME


def host_name_problem(name) -> str | None:
    if not isinstance(name, str) or not _HOST_NAME.match(name):
        return "must be 1-32 letters, digits, '_' or '-', starting with a letter or digit"
    if name == LOCAL:
        return f"{LOCAL!r} names this machine"
    return None


def target_problem(target) -> str | None:
    """An ssh destination that is one word ssh cannot take as an option (no leading '-')."""
    if not isinstance(target, str) or not _TARGET.match(target) or target.startswith("-"):
        return "must be an ssh destination (host, alias or user@host), not starting with '-'"
    return None


def path_problem(path) -> str | None:
    if not isinstance(path, str) or not _PATH.match(path) or path.startswith("-") \
            or ".." in path.split("/"):
        return ("must be a path of letters, digits and . _ - / + (no '..', not starting with '-'; "
                "relative paths are in the login dir there)")
    return None


def check_host(host: Host) -> Host:
    """``host``, or a usage error naming its first bad field."""
    for what, value, why in (("host name", host.name, host_name_problem(host.name)),
                             ("ssh target", host.target, target_problem(host.target)),
                             ("toplevel", host.toplevel, path_problem(host.toplevel)),
                             ("--python", host.python, path_problem(host.python))):
        if why:
            raise UsageError(f"bad {what} {value!r}: {why}")
    return host


def load_hosts() -> dict[str, Host]:
    """Every recorded host by name, in the file's order; a bad file is an error naming it."""
    path = hosts_path()
    table = read_toml(path)
    hosts = {}
    for name, entry in (table.get("host") or {}).items():
        if not isinstance(entry, dict) or set(entry) - {"target", "toplevel", "python", "worktrees"}:
            raise UsageError(f"{path}: [host.{name}] must have only target, toplevel, python and worktrees")
        try:
            hosts[name] = check_host(Host(name, entry.get("target"), entry.get("toplevel"),
                                          entry.get("python", "python3")))
        except UsageError as exc:
            raise UsageError(f"{path}: [host.{name}]: {exc}") from None
    return hosts


def get_host(name: str) -> Host:
    hosts = load_hosts()
    if name not in hosts:
        known = ", ".join(hosts) or "none yet"
        raise UsageError(f"no host {name!r} (hosts: {known}; add one: inv host.add NAME SSH_TARGET)")
    return hosts[name]


def recorded_worktrees() -> dict[str, list[str]]:
    """The worktree names recorded for each host (``worktrees = [...]``), bad names left out."""
    table = read_toml(hosts_path()).get("host") or {}
    out = {}
    for name, entry in table.items():
        names = entry.get("worktrees") if isinstance(entry, dict) else None
        out[name] = [w for w in names if not worktree_name_problem(w)] if isinstance(names, list) else []
    return out


def _toml(hosts: dict[str, Host], worktrees: dict[str, list[str]]) -> str:
    lines = ["# chtop's hosts (inv host.add / host.remove write this file; worktrees: as chtop last saw them)\n"]
    for host in hosts.values():
        lines.append(f"\n[host.{host.name}]\n")
        lines += [f"{key} = {json.dumps(value)}\n" for key, value in asdict(host).items() if key != "name"]
        if worktrees.get(host.name):
            lines.append(f"worktrees = {json.dumps(sorted(worktrees[host.name]))}\n")
    return "".join(lines)


def save_hosts(hosts: dict[str, Host], worktrees: dict[str, list[str]] | None = None) -> None:
    """Write ``hosts`` (and ``worktrees``: else the worktree records kept as they are)."""
    path = hosts_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_atomic(path, _toml(hosts, recorded_worktrees() if worktrees is None else worktrees), mode=0o600)


def record_worktrees(host_name: str, names) -> None:
    """Record ``names`` as the worktrees of host ``host_name`` (written only when they changed)."""
    with _WRITING:
        hosts, known = load_hosts(), recorded_worktrees()
        names = sorted(set(names))
        if host_name in hosts and sorted(known.get(host_name, [])) != names:
            known[host_name] = names
            save_hosts(hosts, known)


def record_worktree(host_name: str, name: str, present: bool = True) -> None:
    """Worktree ``name`` made (``present``) or deleted on host ``host_name``."""
    with _WRITING:
        names = set(recorded_worktrees().get(host_name, []))
        record_worktrees(host_name, names | {name} if present else names - {name})


def record_host(host: Host) -> None:
    hosts = load_hosts()
    hosts[host.name] = check_host(host)
    save_hosts(hosts)


def forget_host(name: str) -> None:
    hosts = load_hosts()
    hosts.pop(name, None)
    save_hosts(hosts)
