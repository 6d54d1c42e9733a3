"""Record classes (named fields, ``__init__``, ``__repr__``, ``==``, optionally frozen), made without
the dataclasses module.

``@dataclass`` builds every class by compiling generated source for its methods, and importing it
imports ``inspect`` (with ``ast``, ``dis`` and ``tokenize``): on this project's 2-core machines the
import took about 6 ms and the ten records a git task defines about 5 ms more, on every command
(issue 24: each daily command's time).  ``@record`` makes the same methods from shared closures:
nothing is compiled.

    @record(frozen=True)
    class Checkout:
        name: str
        path: Path
        store: Path = Path()
        paths: list[str] = Factory(list)      # a fresh default per instance

The fields are the class's own annotations, in order; one with a class value is optional, and a
field without one may not follow it.  ``__post_init__`` runs after ``__init__`` where the class
defines it.  Frozen records refuse assignment (``FrozenInstanceError``) and hash by their fields;
the others are unhashable, as a dataclass's are.  ``replace``, ``asdict`` and ``field_names`` do what
their ``dataclasses`` namesakes do for these classes.
"""

from __future__ import annotations

FIELDS = "__record_fields__"


class FrozenInstanceError(AttributeError):
    """An assignment to a field of a frozen record."""


class Factory:
    """A field's default made afresh for each instance: ``Factory(list)``."""

    __slots__ = ("make",)

    def __init__(self, make) -> None:
        self.make = make


_NO_DEFAULT = object()


def record(cls=None, *, frozen: bool = False):
    """Make ``cls`` a record class (``@record`` or ``@record(frozen=True)``)."""
    def wrap(cls):
        return _make_record(cls, frozen)
    return wrap if cls is None else wrap(cls)


def _make_record(cls, frozen: bool):
    names = tuple(cls.__dict__.get("__annotations__", {}))
    defaults = [cls.__dict__.get(name, _NO_DEFAULT) for name in names]
    _check_default_order(cls, names, defaults)
    for name, default in zip(names, defaults, strict=True):
        if isinstance(default, Factory):
            delattr(cls, name)           # as a dataclass field with a factory: no class attribute
    setattr(cls, FIELDS, names)
    cls.__init__ = _init(cls, names, defaults, frozen)
    cls.__repr__ = _repr(names)
    cls.__eq__ = _eq(names)
    if frozen:
        cls.__setattr__ = _refuse_assignment
        cls.__delattr__ = _refuse_deletion
        cls.__hash__ = lambda self: hash(tuple(getattr(self, name) for name in names))
    else:
        cls.__hash__ = None
    cls.__match_args__ = names
    return cls


def _check_default_order(cls, names: tuple[str, ...], defaults: list) -> None:
    seen_default = False
    for name, default in zip(names, defaults, strict=True):
        if default is _NO_DEFAULT and seen_default:
            raise TypeError(f"{cls.__qualname__}: field {name!r} without a default follows one with a default")
        seen_default = seen_default or default is not _NO_DEFAULT


def _init(cls, names: tuple[str, ...], defaults: list, frozen: bool):
    count = len(names)
    known = frozenset(names)
    set_field = object.__setattr__ if frozen else setattr
    post_init = getattr(cls, "__post_init__", None)

    def __init__(self, *args, **kwargs):
        if len(args) > count:
            raise TypeError(f"{cls.__qualname__}() takes {count} field values but {len(args)} were given")
        for name, value in zip(names, args, strict=False):      # the rest from kwargs and defaults
            if name in kwargs:
                raise TypeError(f"{cls.__qualname__}() got multiple values for {name!r}")
            set_field(self, name, value)
        for name, default in zip(names[len(args):], defaults[len(args):], strict=True):
            if name in kwargs:
                value = kwargs[name]
            elif default is _NO_DEFAULT:
                raise TypeError(f"{cls.__qualname__}() missing required field {name!r}")
            else:
                value = default.make() if isinstance(default, Factory) else default
            set_field(self, name, value)
        unknown = [name for name in kwargs if name not in known]
        if unknown:
            raise TypeError(f"{cls.__qualname__}() got unexpected field(s) {', '.join(map(repr, unknown))}")
        if post_init is not None:
            self.__post_init__()

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _repr(names: tuple[str, ...]):
    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({inner})"
    return __repr__


def _eq(names: tuple[str, ...]):
    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in names)
    return __eq__


def _refuse_assignment(self, name, value):
    raise FrozenInstanceError(f"cannot assign to field {name!r} of a frozen {type(self).__qualname__}")


def _refuse_deletion(self, name):
    raise FrozenInstanceError(f"cannot delete field {name!r} of a frozen {type(self).__qualname__}")


def field_names(item) -> tuple[str, ...]:
    """The field names of a record class or instance, in order."""
    return getattr(item, FIELDS)


def is_record(item) -> bool:
    return hasattr(type(item), FIELDS) and not isinstance(item, type)


def replace(item, **changes):
    """A copy of the record ``item`` with ``changes``."""
    unknown = set(changes) - set(field_names(item))
    if unknown:
        raise TypeError(f"{type(item).__qualname__} has no field(s) {', '.join(sorted(unknown))}")
    return type(item)(**{name: changes.get(name, getattr(item, name)) for name in field_names(item)})


def asdict(item) -> dict:
    """The record as a dict, nested records, lists, tuples and dicts copied as ``dataclasses.asdict`` does."""
    return {name: _plain(getattr(item, name)) for name in field_names(item)}


def _plain(value):
    if is_record(value):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value
