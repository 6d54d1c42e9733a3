"""The `chtop` console script: the same Invoke tasks as `inv`, from any directory.

`chtop sbox.claude` works in a project that is not a chtop workspace (the
current directory is sandboxed); inside a workspace `chtop TASK` and
`inv TASK` are the same thing.  Two commands are the console script's own:
``chtop shell-init bash|zsh`` and ``chtop go NAME`` (see jump.py).  Installed by pyproject.toml:
``chtop = "chtop_tasks.cli:main"``.
"""

from __future__ import annotations

import sys
from importlib import metadata

from invoke import Program


def version() -> str:
    try:
        return metadata.version("chtop")
    except metadata.PackageNotFoundError:
        return "0.0.0+checkout"


def program() -> Program:
    from . import namespace

    return Program(namespace=namespace, name="chtop", binary="chtop", version=version())


OWN_COMMANDS = ("shell-init", "go")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in OWN_COMMANDS:
        from .jump import main as jump_main

        sys.exit(jump_main(args))
    program().run(argv)


if __name__ == "__main__":
    main()
