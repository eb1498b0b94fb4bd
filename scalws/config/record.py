"""Record classes from annotated class bodies: the part of the standard
library's dataclasses that this code uses, without it. dataclasses imports
inspect, and with it ast, dis and tokenize's friends: 1.5 MiB of objects
in every process of a tree (the master, and every child forked from it),
for a decorator that runs once per class (issue 37, ADR 0037).

    @dataclass                      an __init__ taking the fields in order
    class Site:                     (inherited ones first), __repr__, __eq__
        listen: list = field(default_factory=list)   (and so unhashable)
        name: str = ""
    @dataclass(frozen=True)         the same, read-only and hashable

`field(default=...)` or `field(default_factory=...)` (with `compare=False`:
not in __eq__ and __hash__), `replace(obj, **kw)`,
and `cls.__dataclass_fields__` (name -> Field, in order) as in
dataclasses. A method the class body defines is kept. Not supported, and
refused where it would silently differ: ClassVar and InitVar annotations,
__post_init__, keyword-only and positional-only fields, a mutable default
(a list, dict or set: use default_factory).
"""
from __future__ import annotations

_MISSING = object()


class FrozenInstanceError(AttributeError):
    pass


class Field:
    __slots__ = ("name", "default", "default_factory", "compare")

    def __init__(self, default=_MISSING, default_factory=_MISSING, compare=True):
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = None
        self.default = default
        self.default_factory = default_factory
        self.compare = compare  # False: left out of __eq__ and __hash__

    def __repr__(self):
        return f"Field(name={self.name!r})"


def field(*, default=_MISSING, default_factory=_MISSING, compare=True) -> Field:
    return Field(default, default_factory, compare)


def dataclass(cls=None, /, *, frozen: bool = False):
    def wrap(c):
        return _make(c, frozen)
    return wrap if cls is None else wrap(cls)


def replace(obj, **changes):
    """A copy of the record `obj` with `changes` (field name -> value)."""
    fields = obj.__dataclass_fields__
    for name in changes:
        if name not in fields:
            raise TypeError(f"{type(obj).__name__} has no field {name!r}")
    return type(obj)(**{n: changes[n] if n in changes else getattr(obj, n) for n in fields})


def _make(cls, frozen):
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: __post_init__ is not supported by scalws.config.record")
    fields = {}
    for base in cls.__mro__[-1:0:-1]:
        fields.update(getattr(base, "__dataclass_fields__", {}))
    for name, ann in cls.__dict__.get("__annotations__", {}).items():
        if "ClassVar" in str(ann) or "InitVar" in str(ann) or "KW_ONLY" in str(ann):
            raise TypeError(f"{cls.__name__}.{name}: {ann} is not supported by "
                            "scalws.config.record")
        value = cls.__dict__.get(name, _MISSING)
        f = value if isinstance(value, Field) else Field(default=value)
        if isinstance(f.default, (list, dict, set)):
            raise ValueError(f"{cls.__name__}.{name}: mutable default {type(f.default).__name__}"
                             " is not allowed: use default_factory")
        f.name = name
        if isinstance(value, Field):  # the class attribute is the default, as dataclasses leaves it
            if f.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        fields[name] = f  # one redefined in a subclass keeps its place, as in dataclasses
    defaulted = False
    for f in fields.values():
        has = f.default is not _MISSING or f.default_factory is not _MISSING
        if defaulted and not has:
            raise TypeError(f"{cls.__name__}: non-default argument {f.name!r} follows "
                            "default argument")
        defaulted = defaulted or has
    cls.__dataclass_fields__ = fields
    cls.__match_args__ = tuple(fields)
    cls._record_compared = tuple(n for n, f in fields.items() if f.compare)
    if "__init__" not in cls.__dict__:
        cls.__init__ = _init(cls, fields, frozen)
    if "__repr__" not in cls.__dict__:
        cls.__repr__ = _repr
    if "__eq__" not in cls.__dict__:
        cls.__eq__ = _eq
    if "__hash__" not in cls.__dict__:
        cls.__hash__ = _hash if frozen else None
    if frozen:
        cls.__setattr__ = _frozen_setattr
        cls.__delattr__ = _frozen_delattr
    return cls


def _init(cls, fields, frozen):
    """The class's __init__, made from source as dataclasses makes it (one
    small function per class): defaults bound as the function's, factories
    called per instance."""
    env = {"_MISSING": _MISSING, "_set": object.__setattr__}
    params, body = [], []
    for f in fields.values():
        n = f.name
        if f.default_factory is not _MISSING:
            env[f"_factory_{n}"] = f.default_factory
            params.append(f"{n}=_MISSING")
            value = f"_factory_{n}() if {n} is _MISSING else {n}"
        elif f.default is not _MISSING:
            env[f"_default_{n}"] = f.default
            params.append(f"{n}=_default_{n}")
            value = n
        else:
            params.append(n)
            value = n
        body.append(f"_set(self, {n!r}, {value})" if frozen else f"self.{n} = {value}")
    src = (f"def __init__(self, {', '.join(params)}):\n    "
           + ("\n    ".join(body) if body else "pass") + "\n")
    exec(src, env)  # noqa: S102 (our own field names, from class bodies)
    fn = env["__init__"]
    fn.__qualname__ = f"{cls.__qualname__}.__init__"
    return fn


def _values(obj):
    return tuple(getattr(obj, n) for n in obj._record_compared)


def _repr(self):
    inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__dataclass_fields__)
    return f"{type(self).__qualname__}({inner})"


def _eq(self, other):
    if other.__class__ is self.__class__:
        return _values(self) == _values(other)
    return NotImplemented


def _hash(self):
    return hash(_values(self))


def _frozen_setattr(self, name, value):
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name):
    raise FrozenInstanceError(f"cannot delete field {name!r}")
