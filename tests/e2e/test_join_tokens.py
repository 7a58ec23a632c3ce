"""`corral up --listen` mints a join token only when none is live, so restarts do not pile
them up; `corral status` lists the live ones (issue 18, item 6)."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def listening(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    c = Cluster(tmp_path_factory.mktemp("tokens"))
    c.home.mkdir(parents=True, exist_ok=True)
    c.workdir.mkdir(exist_ok=True)
    cfg = c.home / "input.conf"
    cfg.write_text(c.config)
    listen = f"127.0.0.1:{_free_port()}"
    try:
        yield c, listen
    finally:
        c.stop()


def _valid_tokens(c: Cluster) -> list[str]:
    out = c.ok("corral", "token", "list")
    return [ln.split()[0] for ln in out.splitlines()[1:] if re.search(r"\bvalid\b", ln)]


def test_restarts_do_not_pile_up_join_tokens(listening: tuple[Cluster, str]) -> None:
    c, listen = listening
    first = c.ok("corral", "up", "--config", str(c.home / "input.conf"), "--listen", listen,
                 timeout=60)
    assert re.search(r"token: \S+", first), first
    assert len(_valid_tokens(c)) == 1
    for _ in range(2):
        c.ok("corral", "down", timeout=60)
        again = c.ok("corral", "up", "--listen", listen, timeout=60)
        assert not re.search(r"token: \S+", again), again
        assert "join tokens: 1 still valid" in again, again
        assert len(_valid_tokens(c)) == 1
    status = c.ok("corral", "status")
    live = _valid_tokens(c)
    assert "join tokens: 1 valid" in status and live[0] in status, status
    # when none is live (revoked, used, expired), the next start mints one again
    c.ok("corral", "token", "revoke", live[0])
    assert "join tokens: 0 valid" in c.ok("corral", "status")
    c.ok("corral", "down", timeout=60)
    third = c.ok("corral", "up", "--listen", listen, timeout=60)
    assert re.search(r"token: \S+", third), third
    assert len(_valid_tokens(c)) == 1
