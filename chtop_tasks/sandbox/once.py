"""Advice said once per group: the first time a given text is to be said in a group, a marker
``<group>/.chtop/said/<hash>`` is made and the text is said; later it is not (a changed text is
new, so it is said again).  With ``CHTOP_VERBOSE=1`` everything is said every time."""

from __future__ import annotations

import os
from hashlib import sha256
from pathlib import Path

from ..core.places import state_dir

VERBOSE_ENV = "CHTOP_VERBOSE"


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def first_time(group_dir: Path, text: str) -> bool:
    """Whether to say ``text`` now: under CHTOP_VERBOSE, or when this group has not been told it.
    A marker that cannot be made (a read-only state dir) means: say it."""
    if verbose():
        return True
    said = state_dir(Path(group_dir)) / "said"
    marker = said / sha256(text.encode()).hexdigest()[:16]
    try:
        said.mkdir(parents=True, exist_ok=True)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    except OSError:
        return True
    os.close(fd)
    return True
