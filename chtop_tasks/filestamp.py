"""What shows that a file changed, without reading it: its inode, device, size, mtime and ctime.

The warm launcher's server stamps every module it loaded (a changed one sends the launch cold), and
the seccomp profile is rendered again when podman's default's stamp moves.
"""

import os


def file_stamp(path) -> tuple | None:
    """``path``'s stamp (following a link, as an import does), or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
