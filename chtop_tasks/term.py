"""Terminal output: colour only on a terminal with NO_COLOR unset."""

from __future__ import annotations

import os
import sys


def use_color(stream=None) -> bool:
    stream = stream or sys.stdout
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def bold(text: str) -> str:
    return f"\033[1m{text}\033[0m" if use_color() else text


def warn(message: str) -> None:
    prefix = "\033[33mwarning:\033[0m " if use_color(sys.stderr) else "warning: "
    print(prefix + message, file=sys.stderr, flush=True)


def say(message: str = "") -> None:
    print(message, flush=True)


def git_color_args() -> list[str]:
    """Git's output is piped through us; keep its colour when we have a terminal."""
    return ["-c", "color.ui=always"] if use_color() else []


def visible(text: str) -> str:
    """``text`` with its control characters made visible (``\\x1b``, ``\\n``, ``\\u202e``...): inert to
    print or to send (agent-written text never drives a terminal)."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in str(text))
