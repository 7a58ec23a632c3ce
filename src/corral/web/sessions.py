"""The dashboard's logins: one-time tokens minted on the controller's socket, and sessions.

`corral web` asks the controller (on its Unix socket, where SO_PEERCRED names the caller)
for a login token; the token is good once, for LOGIN_TTL seconds, and only for that uid.
The browser spends it (POST /login) for a session: a random cookie value (HttpOnly,
SameSite=Strict) and a CSRF token the page sends back in a header on every POST.  Only
digests of tokens and cookies are kept, in memory: a controller restart logs everyone out.
Pure code with an injected clock (docs/SECURITY.md, "The dashboard").
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

LOGIN_TTL = 120.0  # seconds a login token stays good
SESSION_TTL = 12 * 3600.0  # seconds a session lasts (it does not renew itself)
MAX_PENDING_LOGINS = 1000  # unspent tokens kept at most (oldest dropped first)
MAX_SESSIONS = 10000


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Session:
    uid: int
    gid: int
    csrf: str
    expires: float


class Logins:
    """Login tokens and sessions, keyed by the SHA-256 of their secret."""

    def __init__(self, login_ttl: float = LOGIN_TTL, session_ttl: float = SESSION_TTL) -> None:
        self.login_ttl = login_ttl
        self.session_ttl = session_ttl
        self.tokens: dict[str, tuple[int, int, float]] = {}  # digest -> (uid, gid, expires)
        self.sessions: dict[str, Session] = {}

    def _prune(self, now: float) -> None:
        for d in [d for d, (_, _, exp) in self.tokens.items() if exp <= now]:
            del self.tokens[d]
        for d in [d for d, s in self.sessions.items() if s.expires <= now]:
            del self.sessions[d]

    def mint(self, uid: int, gid: int, now: float) -> str:
        """A new single-use login token for uid."""
        self._prune(now)
        while len(self.tokens) >= MAX_PENDING_LOGINS:
            del self.tokens[next(iter(self.tokens))]
        token = secrets.token_urlsafe(32)
        self.tokens[_digest(token)] = (uid, gid, now + self.login_ttl)
        return token

    def spend(self, token: str, now: float) -> tuple[str, Session] | None:
        """Trade a login token for a session: (cookie value, session), or None when the
        token is unknown, spent or expired.  The token is gone either way."""
        held = self.tokens.pop(_digest(token), None)
        if held is None:
            return None
        uid, gid, expires = held
        if expires <= now:
            return None
        self._prune(now)
        while len(self.sessions) >= MAX_SESSIONS:
            del self.sessions[next(iter(self.sessions))]
        cookie = secrets.token_urlsafe(32)
        session = Session(uid, gid, secrets.token_urlsafe(24), now + self.session_ttl)
        self.sessions[_digest(cookie)] = session
        return cookie, session

    def session(self, cookie: str | None, now: float) -> Session | None:
        if not cookie:
            return None
        s = self.sessions.get(_digest(cookie))
        if s is None or s.expires <= now:
            return None
        return s

    def end(self, cookie: str) -> None:
        self.sessions.pop(_digest(cookie), None)


def csrf_ok(session: Session, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(session.csrf.encode(), sent.encode())
