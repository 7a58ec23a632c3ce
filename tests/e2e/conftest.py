from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster, running


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory) as c:
        yield c


@pytest.fixture(scope="session", autouse=True)
def _interpreter_reachable_by_test_users() -> Iterator[None]:
    """The interpreter may live under root's 0700 home (pyenv) and the test users must run it.

    Granted once for the whole run, so that one module's fixture restoring the modes cannot
    take the interpreter away from a test still using it; the module fixtures that call
    grant_traverse then find nothing left to change.
    """
    import os
    import sys

    from tests.e2e.test_users import grant_traverse

    if os.geteuid() != 0:
        yield
        return
    restore = grant_traverse(sys.executable) + grant_traverse(os.path.realpath(sys.executable))
    try:
        yield
    finally:
        for d, mode in reversed(restore):
            os.chmod(d, mode)
