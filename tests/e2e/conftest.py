from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster, running


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory) as c:
        yield c
