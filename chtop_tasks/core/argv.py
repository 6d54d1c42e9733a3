"""Arguments after ``--``, exactly as the user typed them.

Invoke hands a task its remainder as one space-joined string, which loses
quoting (``inv git.rebase-down -- --exec 'make test'``), so pass-through
tasks take them from the original argv instead.
"""

from __future__ import annotations

import sys


def remainder_args(argv: list[str] | None = None) -> list[str]:
    """The args after the first ``--`` in ``argv`` (default ``sys.argv``)."""
    argv = sys.argv if argv is None else argv
    try:
        index = argv.index("--")
    except ValueError:
        return []
    return list(argv[index + 1:])
