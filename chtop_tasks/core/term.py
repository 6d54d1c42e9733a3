"""Terminal output: colour only on a terminal with NO_COLOR unset; text reaches the terminal inert.

Whatever chtop prints may carry text the agent wrote (diffs, file and branch names, commit subjects,
git's error text, log fields), and a terminal acts on control sequences in it: OSC 2 sets the window
title, OSC 52 writes the clipboard, cursor-up and erase-line hide lines of the diff under review.
``inert`` shows every control character the way ``cat -v`` does (ESC as ``^[``, DEL as ``^?``, a C1
control as ``M-^[``...), newline and tab kept, and the bidirectional controls that reorder what a
line shows ("Trojan Source") as ``<U+202E>``, as ``less`` does; ``say`` and ``warn`` print through
it, keeping only colour (SGR, ``ESC [ params m``) and only when that stream is a terminal with
colour on.
"""

from __future__ import annotations

import os
import re
import sys

# C0 (tab and newline kept), DEL, C1, and the bidi embeddings and isolates, as code points
_CONTROLS = (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SGR = "(\x1b\\[[0-9;:]*m)"      # colour: ESC [ params m, the one sequence kept (on a colour terminal)


def _visible(char: str) -> str:
    code = ord(char)
    if code > 0xFF:                                    # a bidirectional control
        return f"<U+{code:04X}>"
    if code == 0x7F:
        return "^?"
    if code >= 0x80:                                   # C1: what cat -v shows for the byte
        return "M-" + _visible(chr(code - 0x80))
    return "^" + chr(code + 0x40)


# every control as it is shown: str.translate's table, made at import
_SHOWN = {code: _visible(chr(code)) for code in _CONTROLS}


def inert(text: str) -> str:
    """``text`` with its control characters made visible (``cat -v``), newline and tab kept."""
    return text.translate(_SHOWN)


def inert_line(text: str) -> str:
    """``inert`` for one line of a log: a newline shows as ``^J`` too (no forged lines)."""
    return inert(text).replace("\n", "^J")


# git's progress redraws one line: a carriage return, then (on a terminal) erase-to-end-of-line
_REDRAW = re.compile("(?:\r(?:\x1b\\[K)?)+(?!\n)")


def progress_as_lines(text: str) -> str:
    """Git's progress (``Rebasing (1/2)\\r\\x1b[K``) as one line per update: each redraw becomes a
    newline, so a streamed command's progress reads as text, not as escape codes made visible."""
    return _REDRAW.sub("\n", text.replace("\r\n", "\n"))


def inert_keeping_colour(text: str, stream=None) -> str:
    """``inert``, but colour (SGR) stays when ``stream`` (stdout) is a terminal with colour on."""
    if not use_color(stream):
        return inert(text)
    # split on the colour sequences (kept): the odd parts are those, the even ones the text between
    parts = re.split(_SGR, text)
    return "".join(part if index % 2 else inert(part) for index, part in enumerate(parts))


def use_color(stream=None) -> bool:
    stream = stream or sys.stdout
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def bold(text: str) -> str:
    return f"\033[1m{text}\033[0m" if use_color() else text


def warn(message: str) -> None:
    prefix = "\033[33mwarning:\033[0m " if use_color(sys.stderr) else "warning: "
    print(prefix + inert_keeping_colour(message, sys.stderr), file=sys.stderr, flush=True)


def error(message: str) -> None:
    """``error: MESSAGE`` on stderr (an exception's text may quote the agent's)."""
    print("error: " + inert(message), file=sys.stderr, flush=True)


def say(message: str = "") -> None:
    print(inert_keeping_colour(message), flush=True)


def git_color_args() -> list[str]:
    """Git's output is piped through us; keep its colour when we have a terminal."""
    return ["-c", "color.ui=always"] if use_color() else []


def visible(text: str) -> str:
    """``text`` with its control characters made visible (``\\x1b``, ``\\n``, ``\\u202e``...): inert to
    print or to send (agent-written text never drives a terminal)."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in str(text))
