"""The `chtop` console script: the same Invoke tasks as `inv`, from any directory.

`chtop sbox.claude` works in a project that is not a chtop workspace (the
current directory is sandboxed); inside a workspace `chtop TASK` and
`inv TASK` are the same thing.  Two commands are the console script's own:
``chtop shell-init bash|zsh`` and ``chtop go NAME`` (see jump.py).  Installed by pyproject.toml:
``chtop = "chtop_tasks.cli.chtop:main"``.

`chtop TASK --flag ...` (one task and its own flags) runs through the light
task path (faststart.py), without invoke's program; every other command line is
invoke's.  Usage errors invoke's parser finds (an unknown flag, a missing
value) exit 2, as every chtop usage error does; a reader that goes away
(``chtop --list | head``) ends the output quietly.
"""

from __future__ import annotations

import os
import sys

from . import faststart

USAGE_EXIT = 2


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("chtop")
    except metadata.PackageNotFoundError:
        return "0.0.0+checkout"


def program_class():
    """invoke's Program, with the parse errors it finds exiting 2 (usage) instead of 1 (invoke is
    imported here, not at the top: the light task path runs a task without it)."""
    from invoke import ParseError, Program

    class ChtopProgram(Program):
        _parse_failed = False

        def run(self, argv=None, exit: bool = True) -> None:  # noqa: A002 - invoke's signature
            try:
                super().run(argv, exit=exit)
            except SystemExit as done:
                if self._parse_failed and done.code == 1:
                    sys.exit(USAGE_EXIT)
                raise

        def _parsing(self, step, *args):
            try:
                return step(*args)
            except ParseError:
                self._parse_failed = True
                raise

        def parse_core(self, argv):
            return self._parsing(super().parse_core, argv)

        def parse_tasks(self):
            return self._parsing(super().parse_tasks)

        def parse_cleanup(self):
            return self._parsing(super().parse_cleanup)

    return ChtopProgram


def program():
    from .. import namespace

    return program_class()(namespace=namespace, name="chtop", binary="chtop", binary_names=["chtop"],
                           version=version())


OWN_COMMANDS = ("shell-init", "go")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in OWN_COMMANDS:
        from .jump import main as jump_main

        sys.exit(jump_main(args))
    try:
        if not (args and not args[0].startswith("-") and faststart.run(args)):
            message = faststart.name_given_as_a_word(args, binary="chtop")
            if message:
                print(f"error: {message}", file=sys.stderr)
                sys.exit(USAGE_EXIT)
            faststart.drop_light_modules()
            program().run(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_broken_pipe()


def quiet_broken_pipe() -> None:
    """The reader of our stdout left: exit without a traceback (as `cat` does)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(1)


if __name__ == "__main__":
    main()
