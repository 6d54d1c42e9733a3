"""Where your runtime dir for chtop is (``${XDG_RUNTIME_DIR or /tmp}/chtop-<uid>``), as a string and
with ``os`` alone: the warm launcher's client asks it before anything else of chtop is imported.
``places.runtime_base`` is this as a Path, and the one every other module asks."""

import os

MAX_RUNTIME_BASE = 46      # unix socket paths must stay under ~100 bytes


def runtime_base_path() -> str:
    base = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or "/tmp", f"chtop-{os.getuid()}")
    if len(base) > MAX_RUNTIME_BASE:
        base = os.path.join("/tmp", f"chtop-{os.getuid()}")
    return base


def is_private_dir(path: str) -> bool:
    """``path`` is a real directory (not a link) of yours that nobody else can enter or write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (st.st_mode & 0o170000) == 0o040000 and st.st_uid == os.getuid() and not st.st_mode & 0o077
