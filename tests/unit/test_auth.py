"""Signed requests between agents and the controller (corral.auth)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from corral.auth import (
    H_NONCE,
    H_SIGNATURE,
    H_TIME,
    H_UID,
    AuthError,
    Verifier,
    check_token,
    derive_cluster_key,
    fingerprint_of_der,
    parse_fingerprint,
    sign_request,
)

KEY = derive_cluster_key("the-join-token")
NOW = 1_800_000_000.0
PATH = "/v1/jobs?ids=7_2&fields=state"
BODY = b'{"spec":{"name":"x"}}'


def signed(**kw: object) -> dict[str, str]:
    args: dict[str, object] = dict(key=KEY, method="POST", path_qs=PATH, body=BODY, uid=1000,
                                   gid=1000, now=NOW)
    args.update(kw)
    return sign_request(**args)  # type: ignore[arg-type]


def test_a_valid_signature_gives_the_signed_uid_and_gid() -> None:
    v = Verifier(KEY)
    assert v.verify("POST", PATH, BODY, signed(uid=1234, gid=56), NOW + 1) == (1234, 56)


def test_the_key_comes_from_the_token() -> None:
    assert derive_cluster_key("the-join-token") == KEY
    assert derive_cluster_key("another-token") != KEY
    with pytest.raises(AuthError, match="bad request signature"):
        Verifier(derive_cluster_key("another-token")).verify("POST", PATH, BODY, signed(), NOW)


@pytest.mark.parametrize("method, path, body", [
    ("GET", PATH, BODY),                        # another method
    ("POST", "/v1/jobs?ids=8&fields=state", BODY),  # another query
    ("POST", PATH, b'{"spec":{"name":"y"}}'),    # another body
])
def test_a_signature_covers_method_path_query_and_body(method: str, path: str, body: bytes) -> None:
    with pytest.raises(AuthError, match="bad request signature"):
        Verifier(KEY).verify(method, path, body, signed(), NOW)


def test_a_forged_uid_or_signature_is_refused() -> None:
    v = Verifier(KEY)
    h = signed(uid=1000)
    h[H_UID] = "0"  # claim root with a signature made for uid 1000
    with pytest.raises(AuthError, match="bad request signature"):
        v.verify("POST", PATH, BODY, h, NOW)
    h = signed()
    h[H_SIGNATURE] = "0" * 64
    with pytest.raises(AuthError, match="bad request signature"):
        v.verify("POST", PATH, BODY, h, NOW)


def test_a_replayed_nonce_is_refused() -> None:
    v = Verifier(KEY)
    h = signed()
    assert v.verify("POST", PATH, BODY, h, NOW) == (1000, 1000)
    with pytest.raises(AuthError, match="replayed"):
        v.verify("POST", PATH, BODY, dict(h), NOW + 5)
    # the same request signed again (new nonce) passes
    assert v.verify("POST", PATH, BODY, signed(), NOW + 5) == (1000, 1000)


@pytest.mark.parametrize("offset", [-61.0, 61.0, -3600.0])
def test_a_timestamp_outside_60_seconds_is_refused(offset: float) -> None:
    with pytest.raises(AuthError, match="from the controller's clock"):
        Verifier(KEY).verify("POST", PATH, BODY, signed(now=NOW + offset), NOW)


def test_a_timestamp_within_60_seconds_passes() -> None:
    v = Verifier(KEY)
    assert v.verify("POST", PATH, BODY, signed(now=NOW - 59), NOW) == (1000, 1000)
    assert v.verify("POST", PATH, BODY, signed(now=NOW + 59), NOW) == (1000, 1000)


def test_unsigned_or_malformed_headers_are_refused() -> None:
    v = Verifier(KEY)
    with pytest.raises(AuthError, match="unsigned"):
        v.verify("GET", "/v1/ping", b"", {}, NOW)
    h = signed()
    del h[H_NONCE]
    with pytest.raises(AuthError, match="unsigned"):
        v.verify("POST", PATH, BODY, h, NOW)
    h = signed()
    h[H_TIME] = "yesterday"
    with pytest.raises(AuthError, match="malformed"):
        v.verify("POST", PATH, BODY, h, NOW)


def test_old_nonces_are_forgotten_but_their_requests_stay_refused() -> None:
    v = Verifier(KEY)
    old = signed(now=NOW)
    v.verify("POST", PATH, BODY, old, NOW)
    v.verify("POST", PATH, BODY, signed(now=NOW + 100), NOW + 100)
    assert old[H_NONCE] not in v.seen  # out of the window: no need to remember it
    with pytest.raises(AuthError):
        v.verify("POST", PATH, BODY, old, NOW + 100)


def test_a_full_nonce_memory_never_lets_a_replay_through() -> None:
    v = Verifier(KEY, max_nonces=3)
    first = signed(now=NOW)
    v.verify("POST", PATH, BODY, first, NOW)
    for i in range(1, 4):
        v.verify("POST", PATH, BODY, signed(now=NOW + i), NOW + i)
    assert len(v.seen) == 3 and first[H_NONCE] not in v.seen
    with pytest.raises(AuthError, match="replayed"):
        v.verify("POST", PATH, BODY, first, NOW + 4)
    # fresh requests still pass
    assert v.verify("POST", PATH, BODY, signed(now=NOW + 4), NOW + 4) == (1000, 1000)


def test_join_token_check() -> None:
    assert check_token("s3cret", "Bearer s3cret")
    assert check_token("s3cret", "bearer s3cret ")
    assert not check_token("s3cret", "Bearer s3cre")
    assert not check_token("s3cret", "Basic s3cret")
    assert not check_token("s3cret", None)
    assert not check_token("", "Bearer ")


def test_fingerprints_read_back_in_every_common_spelling() -> None:
    der = b"not really a certificate, but bytes all the same"
    digest = hashlib.sha256(der).digest()
    fp = fingerprint_of_der(der)
    assert fp == "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
    assert parse_fingerprint(fp) == digest
    assert parse_fingerprint(digest.hex()) == digest
    assert parse_fingerprint("SHA256:" + ":".join(f"{b:02X}" for b in digest)) == digest
    with pytest.raises(ValueError):
        parse_fingerprint("SHA256:tooshort")
    with pytest.raises(ValueError):
        parse_fingerprint("")
