"""corral.jsonio: orjson's speed, json's answers (what it accepts and what it writes)."""

from __future__ import annotations

import json

import pytest

from corral import jsonio

CASES = [
    {"job_id": 7, "name": "train", "nodes": ["node-1"], "t": 1700000000.125, "x": None},
    {"env": {"LANG": "C.UTF-8", "WEIRD": "caf\udce9"}},  # a non-UTF-8 byte, surrogateescaped
    {"big": 2**70, "neg": -(2**70)},
    {1: "int keys become strings"},
    ["ünïcødé", True, False, 0.1, 1e16],
]


@pytest.mark.parametrize("obj", CASES)
def test_round_trip_equals_json(obj: object) -> None:
    text = jsonio.dumps(obj)
    assert json.loads(text) == json.loads(json.dumps(obj))
    assert jsonio.loads(text) == json.loads(json.dumps(obj))
    assert jsonio.loads(text.encode()) == jsonio.loads(text)


def test_compact() -> None:
    assert jsonio.dumps({"a": [1, 2]}) == '{"a":[1,2]}'


def test_accepts_what_json_accepts() -> None:
    # lone surrogates escaped by a client's json.dumps, and NaN: orjson refuses them
    assert jsonio.loads('{"v":"\\udce9"}') == {"v": "\udce9"}
    assert jsonio.loads(b'{"v":NaN}')["v"] != jsonio.loads(b'{"v":NaN}')["v"]


@pytest.mark.parametrize("bad", [b"", b"{", b"\xff\xfe{", b"[1,]", b'{"a":}',
                                 b"[" * 100_000 + b"]" * 100_000])  # too deep for json
def test_refuses_what_json_refuses(bad: bytes) -> None:
    with pytest.raises(ValueError):
        jsonio.loads(bad)


def test_not_json_raises_type_error() -> None:
    with pytest.raises(TypeError):
        jsonio.dumps({"s": {1, 2}})
