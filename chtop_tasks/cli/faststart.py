"""The light task path of ``inv TASK --flag ...`` and ``chtop TASK ...``: the one task, without invoke.

When a command line names one task with only its own ``--long`` flags (and maybe ``-- ARGS``),
invoke's program would do nothing but parse those flags and call the task's body with them; this
path does that itself, with the task modules imported in light mode (``taskdef.LIGHT``: ``@task``
records its arguments, invoke is not imported).  The tasks are the ones invoke's collection is built
from (``tasks.NAMESPACE_MODULES`` and ``ROOT_TASK_MODULES``, named as ``Collection.from_module``
names them), so a new task is picked up as ``inv --list`` picks it up; only the module that can
define the task named is imported.

What it takes on: ``TASK``, then any of that task's own flags, each at most once, as ``--flag`` (a
boolean), ``--flag VALUE`` or ``--flag=VALUE`` (a string, or digits for an int), then optionally
``-- ARGS``.  A task's exit is handled as invoke's program handles it (the message on stderr, the
code), and so is an interrupt (exit 1).

What it leaves to invoke's program, which then runs exactly as it would have (the light modules
dropped first): a core flag (``--list``, ``--help``, ``--complete``, ``--version``, ``-e``...), a
short flag, ``--no-flag``, a flag the task does not have or a repeated one, a missing value or one
that starts with ``-``, a positional argument or a second task, a task with pre/post tasks,
positional/optional/iterable arguments or aliases, and any invoke config (an ``INVOKE_*`` variable,
or an invoke.yaml/.yml/.json/.py in /etc, your home or the checkout root), which could change how
invoke parses or runs.  ``tests/integration/test_inv_fastpath.py`` checks, for every task and many flag forms,
that what this path takes on it parses as invoke's parser does.
"""

from __future__ import annotations

import os
import sys

VALUE_KINDS = (str, int)
PLAIN_OPTIONS = {"name", "help", "auto_shortflags"}   # what changes neither parsing nor running
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".py")


def invoke_configured(project: str | None) -> bool:
    """Whether invoke would read any config for this run (env or a file)."""
    if any(key.startswith("INVOKE_") for key in os.environ):
        return True
    prefixes = ["/etc/invoke", os.path.join(os.path.expanduser("~"), ".invoke")]
    if project:
        prefixes.append(os.path.join(project, "invoke"))
    return any(os.path.exists(prefix + suffix) for prefix in prefixes for suffix in CONFIG_SUFFIXES)


def dashed(name: str) -> str:
    return name.replace("_", "-")


def flag_name(param: str) -> str:
    """A parameter's long flag, as invoke names it: ``dry_run`` is ``--dry-run``, ``continue_`` is ``--continue``."""
    return param.strip("_").replace("_", "-")


def light_tasks(word: str | None = None) -> dict[str, object]:
    """The tasks by their full names (``git.status``), as LightTasks: the task modules imported light.
    With ``word`` (the task the command line names), only the one module that can define it is
    imported (the ``git`` namespace for ``git.status``, ``demo``'s module for ``demo``); else all."""
    from . import taskdef

    taskdef.LIGHT = True
    from .. import tasks

    modules, roots = tasks.NAMESPACE_MODULES, tuple(tasks.ROOT_TASK_MODULES)
    if word is not None:
        prefix, dot, _ = word.rpartition(".")
        modules = tuple(m for m in modules if dot and dashed(m) == prefix)
        roots = tuple(r for r in roots if not dot and dashed(r) == word)
    table = {}
    for module in map(tasks.namespace_module, modules):
        if hasattr(module, "ns") or hasattr(module, "namespace"):
            continue       # an explicit collection: invoke's own rules
        prefix = dashed(module.__name__.rsplit(".", 1)[-1])
        for value in vars(module).values():
            if isinstance(value, taskdef.LightTask):
                table[f"{prefix}.{task_name(value)}"] = value
    for value in map(tasks.root_task, roots):
        if isinstance(value, taskdef.LightTask):
            table[task_name(value)] = value
    return table


def task_name(light) -> str:
    return dashed(light.options.get("name") or light.body.__name__)


def flag_kinds(light) -> dict[str, tuple[str, type]] | None:
    """``--flag`` -> (parameter, kind: bool or a value's type), or None when invoke's parser is needed."""
    if light.pre or not set(light.options) <= PLAIN_OPTIONS:
        return None
    params = defaulted_parameters(light.body)
    if params is None:
        return None
    kinds = {}
    for name, default in params:
        kind = str if default is None else type(default)
        if kind is not bool and kind not in VALUE_KINDS:
            return None
        kinds[flag_name(name)] = (name, kind)
    return kinds


def defaulted_parameters(body) -> list[tuple[str, object]] | None:
    """``(name, default)`` of each parameter of ``body`` after the context, as invoke reads them
    (``inspect.signature``); None unless all are plain positional-or-keyword ones with a default."""
    import inspect

    params = list(inspect.signature(body).parameters.values())
    if not params or any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params) \
            or any(p.default is p.empty for p in params[1:]):
        return None
    return [(p.name, p.default) for p in params[1:]]


def parse_flags(words: list[str], kinds: dict[str, tuple[str, type]]) -> dict | None:
    """The task's keyword arguments from ``--flag``, ``--flag VALUE``, ``--flag=VALUE``; None for anything else."""
    values: dict = {}
    index = 0
    while index < len(words):
        word = words[index]
        if not word.startswith("--"):
            return None
        flag, has_value, value = word[2:].partition("=")
        if flag not in kinds or kinds[flag][0] in values:
            return None
        param, kind = kinds[flag]
        if kind is bool:
            if has_value:
                return None
            values[param] = True
        else:
            if not has_value:
                index += 1
                if index == len(words):
                    return None
                value = words[index]
            if not value or value.startswith("-") or (kind is int and not is_int(value)):
                return None
            values[param] = kind(value)
        index += 1
    return values


def is_int(value: str) -> bool:
    """Plain decimal digits, as ``int`` reads them (not every ``str.isdigit`` character is one)."""
    return value.isdecimal()


def task_words(argv: list[str]) -> list[str]:
    """The task and its flags: what comes before ``--`` (the rest is passed through, as invoke's remainder)."""
    return argv[:argv.index("--")] if "--" in argv else list(argv)


def light_call(table: dict, argv: list[str]):
    """(body, kwargs) of the call invoke's program would make for ``argv``, from ``light_tasks``'
    table; None when the command line is one this path leaves to invoke."""
    words = task_words(argv)
    light = table.get(words[0]) if words else None
    kinds = flag_kinds(light) if light is not None else None
    kwargs = parse_flags(words[1:], kinds) if kinds is not None else None
    return None if kwargs is None else (light.body, kwargs)


def planned_call(argv: list[str], project: str | None):
    """(body, kwargs) when ``argv`` is one task with its own flags; None (nothing imported) otherwise."""
    words = task_words(argv)
    if not words or words[0].startswith("-") or invoke_configured(project):
        return None
    call = light_call(light_tasks(words[0]), argv)
    if call is None:
        drop_light_modules()
    return call


def drop_light_modules() -> None:
    """Forget the task modules imported light, so invoke's collection imports them with its @task."""
    from . import taskdef

    taskdef.LIGHT = False
    for name in [n for n in sys.modules if n == "chtop_tasks.tasks" or n.startswith("chtop_tasks.tasks.")]:
        del sys.modules[name]
    package = sys.modules.get("chtop_tasks")
    if package is not None:
        package.__dict__.pop("tasks", None)


class LazyContext:
    """The task's ``c``: invoke's Context, made (invoke imported) only when a task uses it."""

    def __getattr__(self, attr):
        if "_context" not in self.__dict__:
            from invoke import Context

            self.__dict__["_context"] = Context()
        return getattr(self.__dict__["_context"], attr)


def run_task(body, kwargs: dict) -> None:
    """Call the task and exit as invoke's program would: 0, or a TaskExit's code with its message."""
    from .taskdef import TaskExit

    try:
        body(LazyContext(), **kwargs)
    except TaskExit as done:
        if done.message:
            print(done.message, file=sys.stderr)
        sys.exit(done.code)
    except KeyboardInterrupt:
        sys.exit(1)


def name_given_as_a_word(argv: list[str], binary: str = "inv") -> str | None:
    """``inv worktree.create dev2``: invoke would answer "No idea what 'dev2' is!".  When the task
    has a ``--name`` flag and the first word after its flags is no task's name, the message showing
    the ``--name`` form; else None (invoke's parser decides)."""
    words = argv[:argv.index("--")] if "--" in argv else list(argv)
    if not words or words[0].startswith("-"):
        return None
    light = light_tasks(words[0]).get(words[0])
    kinds = flag_kinds(light) if light is not None else None
    if not kinds or "name" not in kinds or kinds["name"][1] is not str:
        return None
    rest, index = list(words[1:]), 0
    while index < len(rest) and rest[index].startswith("--"):
        flag, has_value, _ = rest[index][2:].partition("=")
        index += 1 if has_value or kinds.get(flag, ("", bool))[1] is bool else 2
    if index >= len(rest) or rest[index].startswith("-") or "name" in {kinds.get(w[2:].partition("=")[0], ("",))[0]
                                                                       for w in rest if w.startswith("--")}:
        return None
    word = rest[index]
    if light_tasks(word).get(word) is not None:       # a second task: invoke's to run
        return None
    flags = rest[:index] + rest[index + 1:]
    fixed = " ".join([binary, words[0], "--name", word, *flags])
    return f"{binary} {words[0]}: the worktree's name is given with --name:  {fixed}"


def run(argv: list[str], project: str | None = None) -> bool:
    """Run the task ``argv`` names and return True; False (and nothing of it imported) when invoke must."""
    call = planned_call(argv, project)
    if call is None:
        return False
    run_task(*call)
    return True
