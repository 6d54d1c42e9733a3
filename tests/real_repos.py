"""Bare remotes made from the real repos' bundles (``../shared/real-repos`` beside the clone, or
``$CHTOP_REAL_REPOS``): the repos chtop's users really work on, as local remotes for tests."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
BUNDLES = ("pipmake", "ksgpu", "pirate")


def real_repos_dir() -> Path | None:
    """Where the bundles are, or None."""
    env = os.environ.get("CHTOP_REAL_REPOS")
    for place in ([Path(env)] if env else []) + [REPO_ROOT.parent / "shared" / "real-repos"]:
        if all((place / f"{name}.bundle").is_file() for name in BUNDLES):
            return place
    return None


def bare_remotes_from_bundles(dest: Path) -> dict[str, Path]:
    """``dest/<name>.git``, a bare clone of each bundle (pipmake, ksgpu, pirate); skips the test
    when the bundles are not there."""
    src = real_repos_dir()
    if src is None:
        pytest.skip(f"the real repos' bundles are not in {REPO_ROOT.parent / 'shared' / 'real-repos'} "
                    "(or $CHTOP_REAL_REPOS)")
    dest.mkdir(parents=True, exist_ok=True)
    remotes = {}
    for name in BUNDLES:
        bare = dest / f"{name}.git"
        subprocess.run(["git", "clone", "--quiet", "--bare", str(src / f"{name}.bundle"), str(bare)],
                       check=True, stdin=subprocess.DEVNULL, capture_output=True)
        remotes[name] = bare
    return remotes


PYPI_HOSTS = ("pypi.org", "files.pythonhosted.org")


def non_public_addresses(host: str) -> list[str]:
    """The addresses ``host`` resolves to here that are not public (none when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, 443, proto=socket.IPPROTO_TCP)
    except OSError:
        return []
    return sorted({info[4][0] for info in infos if not ipaddress.ip_address(info[4][0]).is_global})


def mark_pypi_private_where_it_resolves_so(top: Path) -> list[str]:
    """PyPI's hosts as ``private`` build entries in ``top``'s ``sandbox/net-allow-build.txt`` where
    they resolve to non-public addresses here (a registry mirror on a build machine, which the proxy
    refuses unless told): the hosts marked."""
    hosts = [host for host in PYPI_HOSTS if non_public_addresses(host)]
    if hosts:
        with open(top / "sandbox" / "net-allow-build.txt", "a") as fh:
            fh.write("".join(f"{host} private\n" for host in hosts))
    return hosts
