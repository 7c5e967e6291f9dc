"""Building frozen pydantic models from values that are already valid, without re-validating.

The state machine folds one entry after another, and with pydantic's own API every fold step
would pay twice for values it had just validated: ``model_copy(update=...)`` for the instant's
next state (pydantic's generic copy: a ``__copy__`` plus bookkeeping, about as costly as the
validation itself) and the validating constructor for a new instant. On a long log (a replay
of a million events, a timeline load) that would be most of the time.

``evolve`` and ``construct`` do the same with plain dict operations and **structural
sharing**: the new model's ``__dict__`` is a shallow copy, so every unchanged value (frozen
models, tuples, strings) is the very object the previous state held. That is only sound for
values that are already what the model's validation would make of them (the state machine's
come from validated entries and payloads); ``tests/unit/table/test_frozen.py`` and the
state machine's property test prove a fold through them equals one through pydantic.

Both are for models without extra fields and without private attributes (``InstantState``,
``TimelineEntry``): ``construct`` refuses others.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

_M = TypeVar("_M", bound=BaseModel)
_set = object.__setattr__


def evolve(model: _M, changes: Mapping[str, Any]) -> _M:
    """``model.model_copy(update=changes)`` (unvalidated, like it), sharing unchanged values.

    ``changes`` must name fields of the model with values of the field's validated type."""
    new = object.__new__(type(model))
    values = model.__dict__.copy()
    values.update(changes)
    _set(new, "__dict__", values)
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | changes.keys())
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


def construct(cls: type[_M], values: Mapping[str, Any]) -> _M:
    """``cls(**values)`` for values that already have their fields' validated types: the
    defaults filled in, nothing validated (pydantic's ``model_construct`` does the same, with
    a Python loop over every field that costs more than validating).

    Raises:
        TypeError: a field is missing a value or unknown, or ``cls`` allows extra fields or
            has private attributes (not what this shortcut is for).
    """
    layout = _LAYOUTS.get(cls) or _layout(cls)
    if values.keys() == layout.fields:  # every field given: nothing to fill in
        data = dict(values)
    else:
        if not layout.required <= values.keys() or not values.keys() <= layout.fields:
            missing = ", ".join(sorted(layout.required - values.keys()))
            unknown = ", ".join(sorted(values.keys() - layout.fields))
            raise TypeError(f"{cls.__name__}: missing {missing or '-'}, unknown {unknown or '-'}")
        data = layout.defaults.copy()
        for name, factory in layout.factories:
            if name not in values:
                data[name] = factory()
        data.update(values)
    new = object.__new__(cls)
    _set(new, "__dict__", data)
    _set(new, "__pydantic_fields_set__", set(values))
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


@dataclass(frozen=True, slots=True)
class _Layout:
    fields: frozenset[str]
    required: frozenset[str]
    defaults: dict[str, Any]
    factories: tuple[tuple[str, Callable[[], Any]], ...]


_LAYOUTS: dict[type[BaseModel], _Layout] = {}


def _layout(cls: type[BaseModel]) -> _Layout:
    """The fields, required fields, plain defaults and default factories of ``cls``.

    Raises: TypeError (extra fields allowed, or private attributes)."""
    if cls.model_config.get("extra") == "allow" or cls.__private_attributes__:
        raise TypeError(f"{cls.__name__} has extra fields or private attributes")
    required: set[str] = set()
    defaults: dict[str, Any] = {}
    factories: list[tuple[str, Callable[[], Any]]] = []
    for name, field in cls.model_fields.items():
        default = field.default
        if field.default_factory is not None:
            factories.append((name, field.default_factory))  # type: ignore[arg-type]
        elif default is PydanticUndefined:
            required.add(name)
        elif isinstance(default, Hashable):
            defaults[name] = default
        else:  # a mutable default: pydantic gives each instance its own copy, so do we
            factories.append((name, partial(copy.deepcopy, default)))
    layout = _Layout(frozenset(cls.model_fields), frozenset(required), defaults, tuple(factories))
    _LAYOUTS[cls] = layout
    return layout


__all__ = ["construct", "evolve"]
