from __future__ import annotations

import msgspec
import pytest

from evokernel import Genome, Lineage
from evokernel.core.genome import FrozenParams


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


def test_params_are_immutable():
    g = Genome.of({"BM": 128, "BN": 64})
    before = g.id
    mutations = [
        lambda p: p.__setitem__("BM", 64),
        lambda p: p.__delitem__("BM"),
        lambda p: p.update(BM=64),
        lambda p: p.pop("BM"),
        lambda p: p.popitem(),
        lambda p: p.clear(),
        lambda p: p.setdefault("x", 1),
        lambda p: p.__ior__({"BM": 64}),
    ]
    for mutate in mutations:
        with pytest.raises(TypeError, match=r"Genome.params is immutable: use genome.replace\(\.\.\.\)"):
            mutate(g.params)
    with pytest.raises(TypeError, match="immutable"):
        g.params["BM"] = 64
    assert g.id == before and g.params == {"BM": 128, "BN": 64}
    copy = dict(g.params)  # a mutable copy, for building a new genome
    copy["BM"] = 64
    assert Genome.of(copy).id != before and g.replace(BM=64).id == Genome.of(copy).id
    assert isinstance(g.replace(BM=64).params, FrozenParams)
    assert isinstance(g.with_lineage(("p",), "point", 1).params, FrozenParams)


def test_ids_and_encoding_unchanged_by_immutable_params():
    # recorded before Genome.params became immutable: stored ids depend on them
    cases = [
        (Genome.of({"BM": 128, "BN": 64}), "0c36092b1a661e4c"),
        (
            Genome.of({"BM": 64, "BN": 256, "BK": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "use_tma": True}),
            "88ebc63480a17776",
        ),
        (Genome.of({"x": 1.5, "name": "a"}, source="def kernel(x):\n    return x\n"), "c01337dc75b0168e"),
        (Genome.of({}), "cfa90d55bfbfe879"),
    ]
    for g, expected in cases:
        assert g.id == expected
    assert cases[0][0].encode() == (
        b'{"lineage":{"generation":0,"operator":"init","parents":[]},"params":{"BM":128,"BN":64},"source":null}'
    )
    assert msgspec.json.encode(cases[0][0].params) == b'{"BM":128,"BN":64}'
    assert repr(cases[0][0].params) == "{'BM': 128, 'BN': 64}"


def test_decoded_pickled_and_copied_params_stay_immutable():
    import copy
    import pickle

    g = Genome.of({"b": 2.5, "a": "row"}, source="src", parents=("p1",), operator="llm")
    for other in (
        Genome.decode(g.encode()),
        pickle.loads(pickle.dumps(g)),
        copy.copy(g),
        copy.deepcopy(g),
        msgspec.convert(msgspec.to_builtins(g), Genome),
    ):
        assert other == g and other.id == g.id and other.lineage == g.lineage
        assert isinstance(other.params, FrozenParams)
        with pytest.raises(TypeError, match="immutable"):
            other.params["a"] = "col"
    params = pickle.loads(pickle.dumps(g.params))
    assert isinstance(params, FrozenParams) and params == g.params
    assert type(copy.copy(g.params)) is FrozenParams and copy.deepcopy(g.params) == g.params
