"""JSON for the controller's hot paths (API bodies and answers, job records): orjson, a C
codec several times faster than `json`, with `json` taking over for what orjson refuses
(integers beyond 64 bits; strings with lone surrogates, which a non-UTF-8 environment
variable carries through Python's surrogateescape), so what is accepted and what is written
is what `json` accepts and writes.

Server side only: the Slurm commands keep `json`, which is already imported and starts
faster than loading orjson.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS  # int keys become strings, as json.dumps makes them


def dumps_bytes(obj: Any) -> bytes:
    """Compact JSON (no spaces), UTF-8."""
    try:
        return orjson.dumps(obj, option=_OPTIONS)
    except TypeError:  # json raises in turn for what is not JSON at all
        return json.dumps(obj, separators=(",", ":")).encode()


def dumps(obj: Any) -> str:
    return dumps_bytes(obj).decode()


def loads(data: bytes | str) -> Any:
    """Raises ValueError (json.JSONDecodeError, or UnicodeDecodeError) on what is not JSON,
    nesting too deep included (where `json` alone would raise RecursionError)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        try:
            return json.loads(data)
        except RecursionError:
            raise e from None
