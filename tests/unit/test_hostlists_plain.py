"""Plain node names take a path of their own in corral.model.hostlists (no python-hostlist
import): it must give python-hostlist's results exactly."""

from __future__ import annotations

import random

import hostlist
import pytest

from corral.model import hostlists


def _random_name(rnd: random.Random) -> str:
    parts = []
    for _ in range(rnd.randint(1, 3)):
        parts.append(rnd.choice(["node", "gpu", "n", "a-", "x.y", "_", "", "rack"]))
        if rnd.random() < 0.8:
            parts.append(str(rnd.randint(0, 30)).zfill(rnd.choice([0, 1, 2, 3])))
    return "".join(parts) or "z"


@pytest.mark.parametrize("seed", range(4))
def test_plain_names_compress_and_expand_as_python_hostlist_does(seed: int) -> None:
    rnd = random.Random(seed)
    for _ in range(1500):
        names = [_random_name(rnd) for _ in range(rnd.randint(1, 12))]
        assert hostlists.compress(names) == str(hostlist.collect_hostlist(list(names))), names
        expr = ",".join(names)
        assert hostlists.expand(expr) == hostlist.expand_hostlist(expr), expr


@pytest.mark.parametrize("names,expected", [
    (["node-1", "node-2", "node-3", "node-4"], "node-[1-4]"),
    (["node-3", "node-1", "node-1", "gpu01", "gpu02", "gpu10"], "gpu[01-02,10],node-[1,3]"),
    (["a1b2", "a1b3", "a2b2"], "a1b[2-3],a2b2"),
    (["login", "login", "node7"], "login,node7"),
])
def test_known_compressions(names: list[str], expected: str) -> None:
    assert hostlists.compress(names) == expected


def test_brackets_and_odd_names_still_go_through_python_hostlist() -> None:
    assert hostlists.expand("node-[1-3],gpu01") == ["node-1", "node-2", "node-3", "gpu01"]
    assert hostlists.compress(["n 1", "n 2"]) == str(hostlist.collect_hostlist(["n 1", "n 2"]))
    with pytest.raises(hostlists.HostlistError):
        hostlists.expand("node-[1-2")
