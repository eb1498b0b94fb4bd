"""scalws/config/record.py against the standard library's dataclasses: the
same __init__, defaults, factories, inheritance, equality, hashing,
repr, replace and pickling for the shapes our classes use, and a clear
refusal of what it does not do."""
from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from scalws.config import record


def pair(frozen=False):
    """One class body made by both decorators."""
    out = []
    for dc, fld in ((dataclasses.dataclass, dataclasses.field), (record.dataclass, record.field)):
        @dc(frozen=frozen)
        class Base:
            name: str
            port: int = 80
            tags: list = fld(default_factory=list)
            seen: tuple = fld(default=(), compare=False)

        @dc(frozen=frozen)
        class Child(Base):
            port: int = 443          # redefined: keeps its place
            extra: dict = fld(default_factory=lambda: {"a": 1})

        out.append(Child)
    return out


def test_init_defaults_factories_and_order_as_dataclasses():
    std, ours = pair()
    assert list(ours.__dataclass_fields__) == list(std.__dataclass_fields__) == \
        ["name", "port", "tags", "seen", "extra"]
    for args, kw in (((), {"name": "a"}), (("b", 8080, ["x"]), {"extra": {}})):
        s, o = std(*args, **kw), ours(*args, **kw)
        assert vars(s) == vars(o)
        assert repr(o) == repr(s)
    a, b = ours("a"), ours("a")
    assert a.tags is not b.tags and a.extra is not b.extra  # a factory call each
    assert ours.port == 443  # the class attribute is the default
    with pytest.raises(TypeError):
        ours()
    with pytest.raises(TypeError):
        ours("a", nope=1)


def test_equality_hash_replace_pickle():
    std, ours = pair()
    assert ours("a", seen=(1,)) == ours("a", seen=(2,))  # compare=False
    assert ours("a") != ours("b")
    assert (ours("a") == std("a")) is False  # another class: not equal
    assert ours.__hash__ is None and std.__hash__ is None
    o = ours("a", tags=["t"])
    r = record.replace(o, port=1)
    assert (r.name, r.port, r.tags) == ("a", 1, ["t"]) and o.port == 443
    with pytest.raises(TypeError):
        record.replace(o, nope=1)
    assert copy.deepcopy(o) == o


@record.dataclass(frozen=True)
class Frozen:
    status: int
    body: bytes = b""


def test_frozen_is_read_only_hashable_and_pickles():
    f = Frozen(200, b"x")
    with pytest.raises(AttributeError):
        f.status = 1
    with pytest.raises(AttributeError):
        del f.body
    assert hash(f) == hash(Frozen(200, b"x")) and {f, Frozen(200, b"x")} == {f}
    assert pickle.loads(pickle.dumps(f)) == f


def test_what_it_does_not_do_is_refused():
    with pytest.raises(ValueError):
        @record.dataclass
        class Mutable:
            items: list = []
    with pytest.raises(TypeError):
        @record.dataclass
        class Order:
            a: int = 1
            b: int
    with pytest.raises(TypeError):
        @record.dataclass
        class Post:
            a: int

            def __post_init__(self):
                pass
    with pytest.raises(TypeError):  # what `a: ClassVar[int] = 1` gives
        record.dataclass(type("Cv", (), {"__annotations__": {"a": "ClassVar[int]"}, "a": 1}))
