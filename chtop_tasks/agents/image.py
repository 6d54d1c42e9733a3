"""The optional local sandbox image, rebuilt whenever its inputs change.

No registry is reachable, so the image is built from local parts only:

1. the host files named in ``containers/host-paths.txt`` are streamed into
   ``localhost/chtop-base:<hash>`` (``tar -c | podman import``);
2. ``containers/Containerfile`` is built on top (``--build-arg BASE=...``)
   into ``localhost/chtop-sandbox:latest``, labelled ``chtop.inputs=<hash>``.

``<hash>`` covers every file in ``containers/`` plus a fingerprint of the host
paths (directory mtimes of copied trees, contents of stamp files), so
installing or upgrading a package changes it.  ``ensure_image`` compares the
label with the current hash and rebuilds on any difference: a stale image is
never run silently: a stale image would run yesterday's toolchain without a word.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

from ..core.errors import CommandFailed, PolicyError, UsageError
from ..core.runner import echo, format_command, run

CONTAINERS_DIR = Path(__file__).resolve().parents[2] / "containers"     # the checkout's, beside chtop_tasks/
IMAGE = "localhost/chtop-sandbox:latest"
BASE = "localhost/chtop-base"
LABEL = "chtop.inputs"
HOST_PATHS = "host-paths.txt"
BUILD_TIMEOUT = 3600


@dataclass
class HostPaths:
    copy: list[Path] = field(default_factory=list)
    empty: list[Path] = field(default_factory=list)
    stamp: list[Path] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)

    @property
    def imported(self) -> bool:
        return bool(self.copy or self.empty)


def read_host_paths(context: Path) -> HostPaths:
    paths = HostPaths()
    file = context / HOST_PATHS
    if not file.exists():
        return paths
    for number, raw in enumerate(file.read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        kind, _, value = line.partition(" ")
        value = value.strip()
        if kind == "exclude" and value:
            paths.exclude.append(value)
        elif kind in ("copy", "empty", "stamp") and value.startswith("/") and ".." not in value.split("/"):
            getattr(paths, kind).append(Path(value))
        else:
            raise PolicyError(f"{file}:{number}: expected 'copy|empty|stamp /ABS/PATH' or "
                              f"'exclude PATTERN', got {raw.strip()!r}")
    return paths


def input_hash(context: Path, host: HostPaths | None = None) -> str:
    """sha256 (16 hex) of the build inputs: the context's files and the host paths."""
    host = read_host_paths(context) if host is None else host
    digest = sha256()

    def add(*parts) -> None:
        for part in parts:
            digest.update(str(part).encode("utf-8", "surrogateescape") + b"\0")

    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        add("file", path.relative_to(context).as_posix())
        digest.update(path.read_bytes())
    for root in host.copy:
        add("copy", root)
        for dirpath, dirnames, _ in os.walk(root):
            dirnames.sort()
            try:
                add(dirpath, os.lstat(dirpath).st_mtime_ns)
            except OSError:
                add(dirpath, "gone")
    for path in host.empty:
        add("empty", path, os.readlink(path) if path.is_symlink() else path.is_dir())
    for path in host.stamp:
        add("stamp", path)
        try:
            digest.update(path.read_bytes())
        except OSError as exc:
            add("unreadable", exc.errno)
    add("exclude", *host.exclude)
    return digest.hexdigest()[:16]


def _inspect(tag: str, template: str, podman: str) -> str | None:
    result = run([podman, "image", "inspect", "--format", template, tag],
                 check=False, quiet=True, timeout=60)
    return result.stdout.strip() if result.ok else None


def image_label(tag: str, podman: str = "podman") -> str | None:
    """The image's chtop.inputs label; None when there is no such image."""
    return _inspect(tag, f'{{{{index .Labels "{LABEL}"}}}}', podman)


def tar_argv(host: HostPaths) -> list[str]:
    argv = ["tar", "-C", "/", "-cf", "-", "--ignore-failed-read", "--warning=no-failed-read",
            "--warning=no-file-changed"]
    argv += [f"--exclude={pattern}" for pattern in host.exclude]
    if host.empty:
        argv += ["--no-recursion", *(str(p).lstrip("/") for p in host.empty if os.path.lexists(p))]
    if host.copy:
        argv += ["--recursion", *(str(p).lstrip("/") for p in host.copy if os.path.lexists(p))]
    return argv


def import_base(host: HostPaths, tag: str, digest: str, podman: str = "podman") -> None:
    """tar the host paths into ``tag`` with podman import (no intermediate file)."""
    tar = tar_argv(host)
    imp = [podman, "import", "--change", f"LABEL {LABEL}={digest}", "-", tag]
    echo(tar + ["|"] + imp)
    producer = subprocess.Popen(tar, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        consumer = subprocess.run(imp, stdin=producer.stdout, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, timeout=BUILD_TIMEOUT)
    finally:
        producer.stdout.close()
        tar_rc = producer.wait()
    if tar_rc not in (0, 1):  # 1: some files changed while read
        raise CommandFailed(f"tar of the host paths failed (exit {tar_rc}): {format_command(tar)}")
    if consumer.returncode != 0:
        raise CommandFailed(f"podman import failed (exit {consumer.returncode}): "
                            f"{format_command(imp)}\n{consumer.stderr.strip()[-800:]}")


def build_image(context: Path, tag: str, digest: str, podman: str = "podman",
                base_repo: str = BASE) -> None:
    """Build ``tag`` from ``context`` (importing the host base first), labelled ``digest``."""
    host = read_host_paths(context)
    argv = [podman, "build", "--label", f"{LABEL}={digest}", "-t", tag]
    if host.imported:
        base = f"{base_repo}:{digest}"
        if image_label(base, podman) != digest:
            import_base(host, base, digest, podman)
        argv += ["--build-arg", f"BASE={base}"]
    argv += ["-f", str(context / "Containerfile"), str(context)]
    run(argv, capture=False, timeout=BUILD_TIMEOUT)
    if image_label(tag, podman) != digest:
        raise CommandFailed(f"built {tag}, but its {LABEL} label is not {digest}")
    if host.imported:
        _drop_old_bases(base_repo, digest, podman)


def _drop_old_bases(base_repo: str, keep: str, podman: str) -> None:
    """A base is the size of the host's /usr: keep only the current one."""
    result = run([podman, "images", "--format", "{{.Repository}}:{{.Tag}}", base_repo],
                 check=False, quiet=True, timeout=60)
    for name in result.stdout.split():
        if name.startswith(base_repo + ":") and name != f"{base_repo}:{keep}":
            run([podman, "rmi", name], check=False, timeout=300)


def ensure_image(context: Path | None = None, tag: str = IMAGE, *, force: bool = False,
                 podman: str = "podman", base_repo: str = BASE, stream=None) -> str:
    """Return ``tag``, (re)built first if it is missing or its inputs changed."""
    context = CONTAINERS_DIR if context is None else context
    if not (context / "Containerfile").is_file():
        raise UsageError(f"{context}/Containerfile not found: the image is built from a chtop checkout")
    digest = input_hash(context)
    current = image_label(tag, podman)
    out = stream or sys.stderr
    if current == digest and not force:
        print(f"chtop: image {tag} is up to date (inputs {digest})", file=out)
        return tag
    if current is None:
        why = "not built yet"
    elif current == digest:
        why = "rebuild forced"
    else:
        why = f"its inputs changed ({current or 'unlabelled'} -> {digest})"
    print(f"chtop: building image {tag}: {why}", file=out)
    old = _inspect(tag, "{{.Id}}", podman)
    build_image(context, tag, digest, podman, base_repo)
    if old and old != _inspect(tag, "{{.Id}}", podman):  # the stale one, now untagged
        run([podman, "rmi", old], check=False, quiet=True, timeout=300)
    return tag


def image_trees(context: Path | None = None) -> tuple[Path, ...]:
    """The host trees the image holds its own copy of (host-paths.txt ``copy``
    lines: /usr, /etc): a launch from the image does not bind them from the host."""
    return tuple(read_host_paths(CONTAINERS_DIR if context is None else context).copy)


def storage_warning(podman: str = "podman") -> str | None:
    """A warning when podman's storage driver copies the whole image per container."""
    result = run([podman, "info", "--format", "{{.Store.GraphDriverName}}"], check=False, quiet=True, timeout=60)
    if result.ok and result.stdout.strip() == "vfs":
        return ("podman stores images with the vfs driver here, which copies the whole image (the size of "
                "/usr) for every launch -- minutes, not seconds. Use the overlay driver "
                "(~/.config/containers/storage.conf: [storage] driver = \"overlay\"; it takes effect "
                "after `podman system reset`, which deletes your podman images and containers).")
    return None
