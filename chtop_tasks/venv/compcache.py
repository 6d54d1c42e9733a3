"""The compiler cache of venv builds: ccache for the C/C++ compilers and nvcc, per worktree,
seeded read-only from the toplevel's.

A repo whose build runs a compiler found on PATH (ksgpu's Makefile runs ``nvcc``; setuptools
runs ``gcc``) gets ccache in front of it through a masquerade dir put first on PATH for the
build's install steps only: ``<group>/.chtop/compiler-cache/bin/{nvcc,gcc,g++,cc,c++}``, links
to ccache, which runs the next compiler of that name on PATH.  A second worktree of the same
sources then compiles nothing: its objects come from the cache, found by content.

Who writes what (the cache is read by builds that install its objects into venvs, and written
by builds that run the repos' code, which the agent can write):

* ``<group>/.chtop/compiler-cache/store/``: what the **toplevel's** builds compiled (on the host,
  the user's own checkout).  Every other build reads it (ccache's read-only remote storage),
  and a feature worktree's build inside its sandbox sees it mounted read-only.
* ``<group>/.chtop/build-cache/<NAME>/ccache/``: each build's own cache, written by that
  worktree's builds alone and read by them alone (a worktree's sandboxed build mounts its own,
  never another's).  So one agent's build can plant an object only in what its own later
  builds read, never in what another worktree's build installs.

The settings are environment variables on the install steps (data in the plan, shown by
``--dry-run``), never a config file: ``CCACHE_CONFIGPATH=/dev/null``, because a build inside the
sandbox can write its own cache dir, where ccache would otherwise read a ``ccache.conf``
(``prefix_command`` runs a command) on the next host build of that worktree.
``CCACHE_BASEDIR`` (the group dir) and ``CCACHE_NOHASHDIR`` make two worktrees at different
paths hit the same entries; ``CCACHE_COMPILERCHECK`` hashes each compiler's (and nvcc's host
compiler's) ``--version``, which names its build, where ccache's default is the mtime of
``/usr/local/bin/nvcc`` (here a wrapper script).  Without ccache on PATH the build runs as
before.  Stale objects cannot come back: ccache finds an entry by the hash of the compiler,
its arguments and every file the compile read, so a changed source or header compiles again.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
from pathlib import Path

from ..core import runner
from ..core.errors import ChtopError
from ..core.places import build_cache_dir, compiler_cache_dir

CCACHE = "ccache"
# the compilers builds find on PATH by name (Debian's python builds extensions with the triplet's)
MASQUERADE = ("nvcc", "gcc", "g++", "cc", "c++", *(f"{platform.machine()}-linux-gnu-{c}" for c in ("gcc", "g++")))
HOST_COMPILER = "g++"                              # nvcc's, when the user did not choose one
MAX_SIZE = "5G"                                    # each worktree's own cache
REMOTE_KEY_SINCE = (4, 8)                          # secondary_storage was renamed remote_storage


def ccache_path() -> str | None:
    """ccache on PATH (resolved), or None: then builds run without a compiler cache."""
    found = shutil.which(CCACHE)
    return os.path.realpath(found) if found else None


@functools.lru_cache(maxsize=4)
def ccache_version(ccache: str) -> tuple[int, ...]:
    """``ccache --version``'s first line as numbers (``(4, 7, 5)``); () when it does not say."""
    result = runner.run([ccache, "--version"], check=False, quiet=True, timeout=30)
    match = re.search(r"version (\d+(?:\.\d+)*)", result.stdout if result.ok else "")
    return tuple(int(n) for n in match.group(1).split(".")) if match else ()


def group_of(root: Path) -> Path:
    """The group dir of a venv's root (its parent: the toplevel and its worktrees are siblings)."""
    return Path(root).parent


def masquerade_dir(group: Path) -> Path:
    return compiler_cache_dir(group) / "bin"


def store_dir(group: Path) -> Path:
    """What the toplevel's builds compiled: read-only to every other build."""
    return compiler_cache_dir(group) / "store"


def own_cache_dir(root: Path) -> Path:
    """``root``'s builds' own ccache dir (read and written by them alone)."""
    root = Path(root).resolve()
    return build_cache_dir(group_of(root), root.name) / "ccache"


def writes_store(root: Path) -> bool:
    """Whether ``root`` is its workspace's toplevel, whose builds (the user's own checkout, on the
    host) write the store every other build reads."""
    from ..workspace.layout import find_workspace

    try:
        ws = find_workspace(Path(root))
    except ChtopError:
        return False
    return ws.is_toplevel and ws.root == Path(root).resolve()


def host_compiler(path_env: str) -> str | None:
    """The real ``g++`` on ``path_env`` (never the masquerade's), for nvcc: without it nvcc would
    run the masquerade's g++, caching its own temporary files once more."""
    found = shutil.which(HOST_COMPILER, path=path_env)
    return os.path.realpath(found) if found else None


def compiler_env(root: Path, environ=None) -> tuple[tuple[str, str], ...]:
    """The environment of ``root``'s install steps that puts ccache in front of the compilers (see
    the module docstring); () without ccache.  PATH keeps a symbolic ``$PATH`` (the step's runner
    expands it, inside the sandbox to the sandbox's)."""
    environ = os.environ if environ is None else environ
    ccache = ccache_path()
    if ccache is None:
        return ()
    root = Path(root).resolve()
    group = group_of(root)
    store = f"file:{store_dir(group)}" + ("" if writes_store(root) else "|read-only")
    remote_key = "CCACHE_REMOTE_STORAGE" if ccache_version(ccache) >= REMOTE_KEY_SINCE else "CCACHE_SECONDARY_STORAGE"
    ccbin = environ.get("NVCC_CCBIN") or host_compiler(environ.get("PATH", ""))
    check = "%compiler% --version" + (f"; {ccbin} --version" if ccbin else "")
    env = [
        ("PATH", f"{masquerade_dir(group)}{os.pathsep}$PATH"),
        ("CCACHE_CONFIGPATH", os.devnull),
        ("CCACHE_DIR", str(own_cache_dir(root))),
        (remote_key, store),
        ("CCACHE_BASEDIR", str(group)),
        ("CCACHE_NOHASHDIR", "1"),
        ("CCACHE_COMPILERCHECK", check),
        ("CCACHE_MAXSIZE", MAX_SIZE),
        ("CCACHE_UMASK", "022"),      # the store is read by sandboxed builds as the agent's user
    ]
    if ccbin:
        env.append(("NVCC_CCBIN", ccbin))
    return tuple(env)


def prepare(root: Path) -> Path | None:
    """Make what ``compiler_env`` names before a build of ``root``: the masquerade links, the store
    and ``root``'s own cache dir (host side: the sandbox never writes the links or the store).
    Returns ``root``'s own cache dir, or None without ccache."""
    ccache = ccache_path()
    if ccache is None:
        return None
    root = Path(root).resolve()
    group = group_of(root)
    links = masquerade_dir(group)
    for path in (compiler_cache_dir(group), links, store_dir(group)):
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    path_env = os.environ.get("PATH", "")
    for name in MASQUERADE:   # a link only where the compiler is: a build may probe PATH for nvcc
        if shutil.which(name, path=path_env):
            link_to(links / name, ccache)
        elif (links / name).is_symlink():
            (links / name).unlink()
    own = own_cache_dir(root)
    own.mkdir(mode=0o700, parents=True, exist_ok=True)
    return own


def link_to(link: Path, target: str) -> None:
    """``link`` is a symlink to ``target`` (replaced atomically when it names something else)."""
    if link.is_symlink() and os.readlink(link) == target:
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def sandbox_mounts(root: Path) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """(writable, read-only) dirs a sandboxed build of ``root`` mounts for the compiler cache: its
    own cache; the links and the store.  Nothing without ccache."""
    if ccache_path() is None:
        return (), ()
    return (own_cache_dir(root),), (compiler_cache_dir(group_of(Path(root).resolve())),)


def stats(root: Path) -> dict[str, int]:
    """ccache's counters for ``root``'s own cache (``--print-stats``): ``direct_cache_hit``,
    ``remote_storage_hit``, ``cache_miss``, ...; {} without ccache."""
    ccache = ccache_path()
    if ccache is None:
        return {}
    env = {"CCACHE_DIR": str(own_cache_dir(root)), "CCACHE_CONFIGPATH": os.devnull}
    result = runner.run([ccache, "--print-stats"], check=False, quiet=True, env=env, timeout=30)
    counters = {}
    for line in result.stdout.splitlines() if result.ok else ():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            counters[key] = int(value)
    return counters
