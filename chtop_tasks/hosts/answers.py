"""A host's answer is data from a stranger: JSON, checked against a schema, every string inert.

The remote host runs agents as hostile as the local ones, and its chtop could have been changed
by one; so its answers are parsed (never evaluated), capped in size, checked field by field
against the schema of the question asked (a wrong type or a missing field refuses the whole
answer, naming the field), unknown fields dropped, and every string made inert
(``term.inert_line``: control characters visible, one line) before anything displays or
compares it.  Names that later reach a command (a worktree's) must also pass their own rule.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..core.errors import ChtopError
from ..core.places import worktree_name_problem
from ..core.term import inert_line

MAX_ANSWER = 4 * 1024 * 1024     # bytes of JSON accepted from a host
MAX_STRING = 4096                # characters kept of one string
MAX_ITEMS = 10000                # entries of one list


class BadAnswer(ChtopError):
    """A host answered something that is not what was asked."""


# A schema is a type, a tuple of types (any of them), a dict (an object: field -> schema, a field
# whose name ends in '?' may be absent or null) or a one-item list (a list of that schema).
# str means an inert string; WORKTREE_NAME a string that is also a valid worktree name.
WORKTREE_NAME = "worktree-name"


@dataclass(frozen=True)
class Matching:
    """A schema: a string that matches ``pattern`` whole (before it is made inert: it must need no
    making inert), e.g. a host:port the answer names that a later command passes on."""
    pattern: str
    what: str

    def problem(self, value: str) -> str | None:
        return None if re.fullmatch(self.pattern, value) else f"is not {self.what}"

REPO = {"repo": str, "branch?": str, "integration": str, "ahead": int, "behind": int, "dirty": bool,
        "problem?": str}
WORKTREES = [{"name": WORKTREE_NAME, "root": str, "venv": str, "problem?": str, "repos": [REPO]}]
SESSIONS = [{"worktree": WORKTREE_NAME, "agent": str, "state": str, "since": (int, float),
             "exit_status?": int, "pending": int}]


def parse_answer(text: str, schema, what: str):
    """``text`` (a host's stdout) as JSON matching ``schema``; BadAnswer naming ``what`` otherwise."""
    if len(text.encode("utf-8", "replace")) > MAX_ANSWER:
        raise BadAnswer(f"{what}: the answer is larger than {MAX_ANSWER} bytes; refused")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise BadAnswer(f"{what}: not JSON ({inert_line(str(exc))}): {inert_line(text[:200])}") from None
    return checked(value, schema, what)


def checked(value, schema, where: str):
    """``value`` made to fit ``schema``: strings inert and capped, unknown keys dropped."""
    if schema == WORKTREE_NAME:
        name = checked(value, str, where)
        why = worktree_name_problem(name)
        if why:
            raise BadAnswer(f"{where}: {name!r} is not a worktree name ({why})")
        return name
    if isinstance(schema, Matching):
        text = checked(value, str, where)
        if text != value or schema.problem(value):
            raise BadAnswer(f"{where}: {text!r} {schema.problem(value) or 'has control characters'}")
        return text
    if isinstance(schema, list):
        if not isinstance(value, list) or len(value) > MAX_ITEMS:
            raise BadAnswer(f"{where}: expected a list (of at most {MAX_ITEMS})")
        return [checked(item, schema[0], f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            raise BadAnswer(f"{where}: expected an object")
        out = {}
        for key, sub in schema.items():
            name, optional = key.rstrip("?"), key.endswith("?")
            if value.get(name) is None and optional:
                out[name] = None
            elif name not in value:
                raise BadAnswer(f"{where}: field {name!r} is missing")
            else:
                out[name] = checked(value[name], sub, f"{where}.{name}")
        return out
    types = schema if isinstance(schema, tuple) else (schema,)
    if isinstance(value, bool) and bool not in types:          # JSON true is no count
        raise BadAnswer(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got a boolean")
    if not isinstance(value, types):
        raise BadAnswer(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__}")
    if isinstance(value, str):
        return inert_line(value[:MAX_STRING])
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
        raise BadAnswer(f"{where}: number out of range")
    return value
