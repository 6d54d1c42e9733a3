"""chtop_tasks.record: the record classes that replace dataclasses on every command's path."""

from __future__ import annotations

import re

import pytest

from chtop_tasks.record import Factory, FrozenInstanceError, asdict, field_names, record, replace


@record(frozen=True)
class Point:
    x: int
    y: int = 0
    tags: list[str] = Factory(list)


@record
class Box:
    label: str
    inner: Point
    seen: dict = Factory(dict)

    def __post_init__(self):
        self.seen["made"] = True


def test_fields_take_positions_keywords_defaults_and_fresh_factory_values():
    first, second = Point(1), Point(x=2, y=3, tags=["a"])
    assert (first.x, first.y, first.tags) == (1, 0, [])
    assert (second.x, second.y, second.tags) == (2, 3, ["a"])
    assert Point(1).tags is not Point(1).tags            # a fresh list each time
    assert field_names(Point) == ("x", "y", "tags") == field_names(first)
    assert "tags" not in Point.__dict__                   # no shared class attribute left behind


@pytest.mark.parametrize("make, message", [
    (lambda: Point(), "missing required field 'x'"),
    (lambda: Point(1, 2, [], 4), "takes 3 field values but 4 were given"),
    (lambda: Point(1, x=2), "multiple values for 'x'"),
    (lambda: Point(1, z=2), "unexpected field(s) 'z'"),
])
def test_wrong_arguments_are_refused_by_name(make, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        make()


def test_frozen_records_refuse_assignment_and_hash_by_value():
    point = Point(1, 2)
    with pytest.raises(FrozenInstanceError):
        point.x = 5
    with pytest.raises(AttributeError):
        del point.y
    assert Point(1, 2, ("t",)) == Point(1, 2, ("t",)) and hash(Point(1, 2, ("t",))) == hash(Point(1, 2, ("t",)))
    assert Point(1, 2) != Point(1, 3)
    assert {Point(1, 2, ()), Point(1, 2, ())} == {Point(1, 2, ())}


def test_plain_records_are_mutable_unhashable_and_run_post_init():
    box = Box("b", Point(1))
    box.label = "c"
    assert box.label == "c" and box.seen == {"made": True}
    with pytest.raises(TypeError):
        hash(box)
    assert Box("b", Point(1)) != Point(1) and Box("b", Point(1)) == Box("b", Point(1))
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags=[])"


def test_replace_and_asdict():
    point = Point(1, 2, ["a"])
    moved = replace(point, y=9)
    assert moved == Point(1, 9, ["a"]) and point.y == 2
    with pytest.raises(TypeError, match="no field"):
        replace(point, z=1)
    plain = asdict(Box("b", point))
    assert plain == {"label": "b", "inner": {"x": 1, "y": 2, "tags": ["a"]}, "seen": {"made": True}}
    assert plain["inner"]["tags"] is not point.tags       # copied, as dataclasses.asdict copies


def test_a_required_field_after_an_optional_one_is_refused_at_class_creation():
    with pytest.raises(TypeError, match="without a default follows"):
        @record
        class Bad:
            a: int = 0
            b: int

