"""Typed errors; each carries the exit code the style guide assigns.

0 success; 1 failure; 2 usage or manifest error; 3 refused on a
precondition (dirty tree, unmerged commits); 130 interrupted.
"""


class ChtopError(Exception):
    """Base class: a message meant for the user, and an exit code."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class CommandFailed(ChtopError):
    """An external command failed."""

    exit_code = 1


class UsageError(ChtopError):
    """Bad arguments or bad names given by the user."""

    exit_code = 2


class ManifestError(UsageError):
    """git_repositories.toml is broken."""


class PolicyError(UsageError):
    """A sandbox/ policy file is missing or malformed."""


class Refused(ChtopError):
    """A precondition does not hold (dirty tree, unmerged commits, ...)."""

    exit_code = 3


class Interrupted(ChtopError):
    """The user pressed Ctrl-C (here, or inside a sandbox that passed the interrupt on)."""

    exit_code = 130


class WorkspaceError(ChtopError):
    """We are not where a workspace says we should be."""

    exit_code = 2


class NotInWorkspace(WorkspaceError):
    """The path is inside no chtop workspace at all (as opposed to a broken one)."""
