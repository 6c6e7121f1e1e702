from __future__ import annotations

import msgspec
import pytest

from evokernel import Genome, Lineage


def test_identity_ignores_key_order_and_lineage():
    a = Genome.of({"BM": 128, "BN": 64, "flag": True})
    b = Genome.of({"flag": True, "BN": 64, "BM": 128}, parents=("x",), operator="point", generation=3)
    assert a.id == b.id and a == b and hash(a) == hash(b)
    assert b.lineage == Lineage(parents=("x",), operator="point", generation=3)


def test_identity_depends_on_values_types_and_source():
    base = Genome.of({"x": 1})
    assert base.id != Genome.of({"x": 2}).id
    assert base.id != Genome.of({"x": True}).id  # True is not 1
    assert base.id != Genome.of({"x": "1"}).id
    assert base.id != Genome.of({"x": 1}, source="def kernel(): pass").id


def test_canonical_encoding_round_trips():
    g = Genome.of({"b": 2.5, "a": "row", "c": False}, source="src", parents=("p1", "p2"), operator="llm")
    data = g.encode()
    assert data == Genome.decode(data).encode()
    back = Genome.decode(data)
    assert back == g and back.lineage == g.lineage and back.source == "src"
    assert data.index(b'"a"') < data.index(b'"b"') < data.index(b'"c"')


def test_frozen_and_value_checks():
    g = Genome.of({"x": 1})
    with pytest.raises(AttributeError):
        g.source = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Genome.of({"x": [1, 2]})  # type: ignore[dict-item]
    assert g.replace(x=2)["x"] == 2 and g["x"] == 1


def test_id_is_stable_across_releases():
    # the id is stored in databases: changing its definition orphans every stored result
    assert Genome.of({"BM": 64, "BN": 64}).id == "e070a5ce888513b0"
    assert msgspec.json.decode(Genome.of({"BM": 64}).identity) == {"params": {"BM": 64}, "source": None}
