"""The `chtop` console script: the same Invoke tasks as `inv`, from any directory.

`chtop sbox.claude` works in a project that is not a chtop workspace (the
current directory is sandboxed); inside a workspace `chtop TASK` and
`inv TASK` are the same thing.  Installed by pyproject.toml:
``chtop = "chtop_tasks.cli:main"``.
"""

from __future__ import annotations

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


def main(argv: list[str] | None = None) -> None:
    program().run(argv)
