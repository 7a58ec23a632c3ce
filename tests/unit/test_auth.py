"""Signed requests between agents and the controller (corral.auth)."""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import pytest

from corral.auth import (
    H_NONCE,
    H_SIGNATURE,
    H_TIME,
    H_UID,
    KIND_LOGIN,
    KIND_NODE,
    AuthError,
    Credential,
    Verifier,
    check_token,
    derive_cluster_key,
    derive_machine_key,
    fingerprint_of_der,
    parse_fingerprint,
    sign_request,
)
from corral.controller.auth import Registry
from corral.store.base import WriteBatch
from corral.store.sqlite import SqliteStore

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


# ---- per-machine keys, join tokens, restarts ----------------------------------------------

def test_nothing_signed_before_the_controller_started_passes() -> None:
    v = Verifier(KEY, not_before=NOW)
    with pytest.raises(AuthError, match="before the controller started"):
        v.verify("POST", PATH, BODY, signed(now=NOW - 1), NOW + 1)
    assert v.verify("POST", PATH, BODY, signed(now=NOW + 0.5), NOW + 1) == (1000, 1000)


def test_each_machine_signs_with_its_own_key_and_a_revoked_key_fails() -> None:
    master = b"m" * 32
    keys = {"aa": derive_machine_key(master, "aa"), "bb": derive_machine_key(master, "bb")}
    assert keys["aa"] != keys["bb"]
    v = Verifier(lambda k: keys.get(k))
    h = sign_request(keys["aa"], "GET", "/v1/ping", b"", 5, 5, NOW, key_id="aa")
    s = v.verify_signed("GET", "/v1/ping", b"", h, NOW)
    assert (s.key_id, s.uid) == ("aa", 5)
    # one machine's key cannot sign for another's id
    h = sign_request(keys["aa"], "GET", "/v1/ping", b"", 5, 5, NOW, key_id="bb")
    with pytest.raises(AuthError, match="bad request signature"):
        v.verify("GET", "/v1/ping", b"", h, NOW)
    del keys["aa"]  # revoked
    h = sign_request(derive_machine_key(master, "aa"), "GET", "/v1/ping", b"", 5, 5, NOW, key_id="aa")
    with pytest.raises(AuthError, match="revoked"):
        v.verify("GET", "/v1/ping", b"", h, NOW)


def test_a_credential_reads_back_and_garbage_is_refused() -> None:
    c = Credential("0123456789abcdef", KIND_NODE, "gpu7", b"k" * 32, "lab")
    back = Credential.loads(c.dumps())
    assert (back.key_id, back.kind, back.name, back.secret, back.cluster) == \
        ("0123456789abcdef", "node", "gpu7", b"k" * 32, "lab")
    for bad in ["the-old-join-token", "{}", '{"v": 2, "key_id": "x", "kind": "root", "name": "n", '
                '"secret": "' + "00" * 32 + '"}']:
        with pytest.raises(ValueError, match="not a Corral machine key"):
            Credential.loads(bad)


def _registry(tmp_path: Path) -> Registry:
    """A registry over the state database in tmp_path, as a restarted controller reads it
    (each change written at once: the controller's writer batches them)."""
    store = SqliteStore(str(tmp_path / "state.db"))
    return Registry(store.load_auth(), lambda recs: store.write(WriteBatch(auth=recs)))


def test_the_registry_is_root_only(tmp_path: Path) -> None:
    _registry(tmp_path)
    path = tmp_path / "state.db"  # the registry's home, with its master secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_join_token_is_spent_once_for_a_key_of_its_scope(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    token, rec = reg.create_token(KIND_NODE, 3600, 1, None, NOW)
    never_busy = lambda name: None  # noqa: E731
    with pytest.raises(AuthError, match="not a login host"):
        reg.enroll(token, KIND_LOGIN, "login1", "", NOW, never_busy)
    cred = reg.enroll(token, KIND_NODE, "gpu1", "10.0.0.5", NOW + 1, never_busy)
    assert cred.kind == KIND_NODE and cred.name == "gpu1"
    assert reg.key_for(cred.key_id) == cred.secret
    with pytest.raises(AuthError, match="used up"):
        reg.enroll(token, KIND_NODE, "gpu2", "", NOW + 2, never_busy)
    # a registry read back (a controller restart) knows the key and the spent token
    again = _registry(tmp_path)
    assert again.key_for(cred.key_id) == cred.secret
    with pytest.raises(AuthError, match="used up"):
        again.enroll(token, KIND_NODE, "gpu2", "", NOW + 2, never_busy)


def test_tokens_expire_are_revoked_and_must_match(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    ok = lambda name: None  # noqa: E731
    token, rec = reg.create_token(KIND_NODE, 60, 5, None, NOW)
    with pytest.raises(AuthError, match="expired"):
        reg.enroll(token, KIND_NODE, "n1", "", NOW + 61, ok)
    with pytest.raises(AuthError, match="wrong join token"):
        reg.enroll(token[:-1] + ("A" if token[-1] != "A" else "B"), KIND_NODE, "n1", "", NOW, ok)
    with pytest.raises(AuthError, match="wrong join token"):
        reg.enroll("garbage", KIND_NODE, "n1", "", NOW, ok)
    reg.revoke_token(rec["id"], NOW)
    with pytest.raises(AuthError, match="revoked"):
        reg.enroll(token, KIND_NODE, "n1", "", NOW, ok)
    bound, _ = reg.create_token(KIND_NODE, 60, 5, "gpu3", NOW)
    with pytest.raises(AuthError, match="for node gpu3"):
        reg.enroll(bound, KIND_NODE, "gpu4", "", NOW, ok)


def test_a_name_with_a_key_or_an_agent_cannot_be_taken_over(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    token, _ = reg.create_token(KIND_NODE, 3600, 5, None, NOW)
    cred = reg.enroll(token, KIND_NODE, "gpu1", "", NOW, lambda n: None)
    with pytest.raises(AuthError, match="already joined"):
        reg.enroll(token, KIND_NODE, "gpu1", "", NOW, lambda n: None)
    with pytest.raises(AuthError, match="served by a connected agent"):
        reg.enroll(token, KIND_NODE, "local1", "", NOW,
                   lambda n: "node local1 is served by a connected agent")
    # revoked alone: gpu1's key stops working, and only then may the name join again
    other = reg.enroll(token, KIND_NODE, "gpu2", "", NOW, lambda n: None)
    assert reg.revoke_machine("gpu1", NOW) == [cred.key_id]
    assert reg.key_for(cred.key_id) is None
    assert reg.key_for(other.key_id) == other.secret
    assert reg.enroll(token, KIND_NODE, "gpu1", "", NOW, lambda n: None).name == "gpu1"
