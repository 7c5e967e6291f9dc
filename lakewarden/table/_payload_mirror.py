"""msgspec mirrors of the payload models: a first check, cheaper than pydantic, that never
accepts what pydantic refuses.

Replay's checker process (``_validate``) validates every ``requested``, ``inflight`` and
``completed`` payload of a large read (two or three texts an instant, most of them never
repeated). pydantic builds a model per text (and one per nested file group and write
statistic); a msgspec ``Struct`` decoder checks the same JSON at a fraction of that. The
checker tries the mirror first and runs pydantic only on the texts the mirror refuses, so
its verdicts are pydantic's exactly when **every text the mirror accepts pydantic accepts,
with the same values**. The mirror is built from the pydantic model's own fields (``mirror``),
never written by hand, and refuses (raises) on anything it does not know how to mirror
exactly, so a change of a model either mirrors itself or fails at import:

- a field becomes a msgspec field of the mirrored type: ``str``, ``int``, ``bool``, ``None``,
  ``Literal`` of strings or integers, ``tuple[X, ...]``, ``dict[str, str]``, a union with
  None, another model (mirrored the same way); msgspec's JSON decoding of these is stricter
  than pydantic's lax mode (no ``"1"`` or ``1.0`` for an int, no ``1`` for a bool, no integer
  beyond 64 bits, no NaN), never laxer;
- the constraints ``min_length``, ``ge`` and ``gt`` as msgspec ``Meta`` of the same bound
  (on the non-None arm of an optional field, where pydantic applies them); any other
  metadata (a validator, ``strict``, a pattern ...) raises;
- the default (a value or a factory); a required field stays required, and ``required``
  names fields made required although the model has a default (narrower: sound);
- ``extra="forbid"`` as ``forbid_unknown_fields``; ``ignore`` (the default) as msgspec's
  default; ``allow``, aliases and any validator, serializer or computed field raise;
- ``narrowed`` replaces a field's type by a subset of what pydantic accepts there, with the
  same values (``RequestedPayload.plan``: only no plan or a ``JobPlan`` whose ``kind`` is
  given; pydantic's legacy upgrade leaves a dict that has a ``kind`` as it is, and the
  discriminator sends ``"job"`` to ``JobPlan``);
- ``upgraded_unless`` names the field whose presence makes the model's one ``before``
  validator (a legacy upgrade) leave its input as it is (``CommitStats.version``: only a
  version-1 payload, which has none, is upgraded); the field becomes required, so the mirror
  refuses every text the validator would change and pydantic reads those.

``tests/unit/history/test_payload_mirror.py`` checks the rule on generated payloads, valid
and mutated: whatever a mirror accepts its model accepts, to the same JSON (the mirror's
``msgspec.json.encode`` and the model's ``model_dump_json`` read back alike).
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import msgspec
from pydantic import BaseModel
from pydantic_core import PydanticUndefined


class MirrorError(TypeError):
    """A model (or one of its fields) that ``mirror`` cannot mirror exactly."""


def mirror(
    model: type[BaseModel],
    *,
    narrowed: dict[str, Any] | None = None,
    required: tuple[str, ...] = (),
    upgraded_unless: str | None = None,
) -> type[msgspec.Struct]:
    """A msgspec ``Struct`` type that decodes a subset of what ``model`` validates from JSON,
    to the same values (see the module's text).

    Raises: MirrorError."""
    narrowed = narrowed or {}
    config = model.model_config
    extra = config.get("extra") or "ignore"
    if extra not in ("ignore", "forbid"):
        raise MirrorError(f"{model.__name__}: extra={extra!r} is not mirrored")
    if config.get("strict") or config.get("populate_by_name") or config.get("alias_generator"):
        raise MirrorError(f"{model.__name__}: its config changes validation: {config}")
    decorators = model.__pydantic_decorators__
    for kind in ("validators", "field_validators", "root_validators", "computed_fields"):
        if getattr(decorators, kind):
            raise MirrorError(f"{model.__name__} has {kind}: not mirrored")
    upgrades = list(decorators.model_validators.values())
    if upgrades and (
        upgraded_unless is None
        or upgraded_unless not in model.model_fields
        or len(upgrades) != 1
        or upgrades[0].info.mode != "before"
    ):
        raise MirrorError(f"{model.__name__} has model validators: not mirrored")
    if upgraded_unless is not None:
        required = (*required, upgraded_unless)
    fields: list[tuple[str, Any, Any]] = []
    for name, info in model.model_fields.items():
        if info.alias is not None or info.validation_alias is not None:
            raise MirrorError(f"{model.__name__}.{name}: an alias is not mirrored")
        if name in narrowed:
            kind = narrowed[name]
        else:
            kind = _mirrored_type(info.annotation, model, name)
            kind = _constrained(kind, info.metadata, model, name)
        if name in required or info.is_required():
            fields.append((name, kind, msgspec.NODEFAULT))
        elif info.default_factory is not None:
            fields.append((name, kind, msgspec.field(default_factory=info.default_factory)))  # type: ignore[arg-type]
        elif info.default is PydanticUndefined:
            raise MirrorError(f"{model.__name__}.{name}: no default and not required")
        else:
            fields.append((name, kind, info.default))
    return msgspec.defstruct(
        f"{model.__name__}Mirror",
        fields,
        kw_only=True,
        forbid_unknown_fields=extra == "forbid",
    )


def _mirrored_type(annotation: Any, model: type[BaseModel], name: str) -> Any:
    where = f"{model.__name__}.{name}"
    if annotation in (str, int, bool):
        return annotation
    if annotation is None or annotation is type(None):
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return mirror(annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        if not all(type(a) in (str, int) for a in args):
            raise MirrorError(f"{where}: a Literal of {args} is not mirrored")
        return annotation
    if origin in (Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        if len(arms) != 1:
            raise MirrorError(f"{where}: a union of {args} is not mirrored")
        mirrored = _mirrored_type(arms[0], model, name)
        return mirrored | None if len(args) == 2 else mirrored
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return tuple[_mirrored_type(args[0], model, name), ...]  # type: ignore[misc]
    if origin is dict and args == (str, str):
        return dict[str, str]
    raise MirrorError(f"{where}: {annotation!r} is not mirrored")


def _constrained(kind: Any, metadata: list[Any], model: type[BaseModel], name: str) -> Any:
    """``kind`` with the field's constraints (on its non-None arm)."""
    if not metadata:
        return kind
    constraints: dict[str, Any] = {}
    for item in metadata:
        if type(item) is annotated_types.MinLen:
            constraints["min_length"] = item.min_length
        elif type(item) is annotated_types.Ge:
            constraints["ge"] = item.ge
        elif type(item) is annotated_types.Gt:
            constraints["gt"] = item.gt
        else:
            raise MirrorError(f"{model.__name__}.{name}: {item!r} is not mirrored")
    arms = get_args(kind) if get_origin(kind) in (Union, types.UnionType) else (kind,)
    base = [a for a in arms if a is not type(None)]
    if len(base) != 1 or base[0] not in (str, int):
        raise MirrorError(f"{model.__name__}.{name}: constraints on {kind!r} are not mirrored")
    meta: Any = Annotated[base[0], msgspec.Meta(**constraints)]
    return meta | None if len(arms) == 2 else meta


def payload_mirrors() -> dict[str, type[msgspec.Struct]]:
    """The mirror of each checked transition's model (``_validate.CHECKED``): the
    ``requested`` one narrowed to no plan or a job plan that names its kind."""
    from lakewarden.table.plans import JobPlan
    from lakewarden.table.stats import CommitStats, WorkloadProfile
    from lakewarden.table.timeline_state import RequestedPayload

    plan = RequestedPayload.model_fields["plan"]
    (union, how), _ = (get_args(a) for a in get_args(plan.annotation))
    if JobPlan not in get_args(union) or how.discriminator != "kind":
        raise MirrorError(f"RequestedPayload.plan: no longer a union of kinds with JobPlan: {plan}")
    job = mirror(JobPlan, required=("kind",))
    return {
        "requested": mirror(RequestedPayload, narrowed={"plan": job | None}),
        "inflight": mirror(WorkloadProfile),
        "completed": mirror(CommitStats, upgraded_unless="version"),
    }


__all__ = ["MirrorError", "mirror", "payload_mirrors"]
