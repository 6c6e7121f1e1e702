"""Genomes: what a kernel candidate *is*, frozen and content-addressed.

A genome holds parameter values, an optional kernel source text (LLM operators rewrite
it) and its lineage. Its identity is a hash of the canonical encoding of the parameters
and the source only: the same configuration reached by two operators, in two runs, is
the same genome, evaluated once.

>>> g = Genome.of({"BM": 128, "BN": 64})
>>> g.id == Genome.of({"BN": 64, "BM": 128}, operator="point").id
True
>>> g.params["BM"] = 64
Traceback (most recent call last):
TypeError: Genome.params is immutable: use genome.replace(...)
>>> g.replace(BM=64)["BM"]
64
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Union

import msgspec

__all__ = ["Value", "Lineage", "Genome", "FrozenParams", "canonical_json"]

#: The values a parameter may take: JSON scalars, so a genome encodes losslessly.
Value = Union[bool, int, float, str]

_ENCODER = msgspec.json.Encoder(order="sorted")


def canonical_json(obj: Any) -> bytes:
    """JSON with sorted keys and no whitespace: equal objects give equal bytes."""
    return _ENCODER.encode(obj)


class FrozenParams(dict):
    """A genome's parameters: a dict that cannot change in place (the genome's id is a hash
    of it). It encodes, compares and copies as a plain dict; `dict(params)` is a mutable copy."""

    __slots__ = ()

    def _immutable(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("Genome.params is immutable: use genome.replace(...)")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _immutable

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and copy rebuild it whole, never item by item
        return (FrozenParams, (dict(self),))

    def __repr__(self) -> str:
        return dict.__repr__(self)


class Lineage(msgspec.Struct, frozen=True, kw_only=True):
    """Where a genome came from: its parents' ids, the operator and the generation."""

    parents: tuple[str, ...] = ()
    operator: str = "init"
    generation: int = 0


class Genome(msgspec.Struct, frozen=True, kw_only=True):
    """A point of a search space, plus optional kernel source, plus lineage.

    Lineage is carried along but is not part of the identity (`id`)."""

    params: dict[str, Value]  # a FrozenParams once built (by `of`, `replace`, decoding or pickle)
    source: str | None = None
    lineage: Lineage = Lineage()

    def __post_init__(self) -> None:
        if type(self.params) is not FrozenParams:
            msgspec.structs.force_setattr(self, "params", FrozenParams(self.params))

    @classmethod
    def of(
        cls,
        params: Mapping[str, Value],
        source: str | None = None,
        *,
        parents: tuple[str, ...] = (),
        operator: str = "init",
        generation: int = 0,
    ) -> Genome:
        for name, value in params.items():
            if not isinstance(name, str):
                raise TypeError(f"parameter names must be str, got {name!r}")
            if not isinstance(value, (bool, int, float, str)):
                raise TypeError(f"parameter {name!r} must be bool, int, float or str, got {type(value).__name__}")
        return cls(
            params=dict(sorted(params.items())),
            source=source,
            lineage=Lineage(parents=tuple(parents), operator=operator, generation=generation),
        )

    @property
    def identity(self) -> bytes:
        """The canonical bytes the id is computed from: parameters and source."""
        return canonical_json({"params": self.params, "source": self.source})

    @property
    def id(self) -> str:
        """Content hash (16 hex digits of SHA-256) of `identity`."""
        return hashlib.sha256(self.identity).hexdigest()[:16]

    def with_lineage(self, parents: tuple[str, ...], operator: str, generation: int) -> Genome:
        return msgspec.structs.replace(
            self, lineage=Lineage(parents=tuple(parents), operator=operator, generation=generation)
        )

    def replace(self, **params: Value) -> Genome:
        """A copy with some parameter values changed (lineage kept)."""
        return msgspec.structs.replace(self, params=dict(sorted({**self.params, **params}.items())))

    def encode(self) -> bytes:
        return canonical_json(self)

    @classmethod
    def decode(cls, data: bytes | str) -> Genome:
        return msgspec.json.decode(data, type=cls)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Genome) and self.identity == other.identity

    def __hash__(self) -> int:
        return hash(self.identity)

    def __getitem__(self, name: str) -> Value:
        return self.params[name]

    def short(self) -> str:
        """A one-line rendering for tables and logs."""
        text = " ".join(f"{k}={v}" for k, v in self.params.items())
        return text + (" +source" if self.source else "")
