"""`corral join | token | node`: grow the cluster to other machines, and manage who may.

docs/SECURITY.md has the trust model: join tokens, each machine's own key, revocation.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

from corral import paths
from corral.admin.cluster import read_pid, spawn, stop_pid, wait_for
from corral.cli import client


def join_hint(url: str, fingerprint: str, token: str) -> list[str]:
    """How to join a machine with `token`: never on a command line (/proc shows it)."""
    return [
        f"    token: {token}",
        "  join a machine with (as root there; the token is read from standard input or a",
        "  root-only file, never from the command line, where every local user can read it):",
        f"    corral join {url} --fingerprint {fingerprint} --token-file FILE",
        f"    corral join {url} --fingerprint {fingerprint}      (then paste the token)",
    ]


def _print_token(answer: dict[str, Any]) -> None:
    what = "a login host" if answer["scope"] == "login" else (
        f"node {answer['node']}" if answer.get("node") else "a node")
    uses = answer["uses_left"]
    print(f"corral: join token {answer['id']} for {what}, {uses} use{'s' if uses != 1 else ''}, "
          f"expires {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(answer['expires']))}")
    listen = answer.get("listen") or {}
    for line in join_hint(listen.get("url", "https://HOST:PORT"),
                          listen.get("fingerprint", "SHA256:…"), answer["token"]):
        print(line)


def _fetch_fingerprint(url_host: str, port: int) -> str:
    """Trust on first use (only with --insecure-trust-first-use): whatever certificate the
    address shows now."""
    import ssl

    from corral.auth import fingerprint_of_pem

    return fingerprint_of_pem(ssl.get_server_certificate((url_host, port), timeout=10))


def _read_token(args: argparse.Namespace) -> str | None:
    """The join token from --token-file or standard input; None (with a message) if none."""
    if args.token_file:
        try:
            st = os.stat(args.token_file)
            with open(args.token_file) as f:
                token = f.read().strip()
        except OSError as e:
            print(f"corral: error: cannot read the token file: {e}", file=sys.stderr)
            return None
        if st.st_mode & 0o077:
            print(f"corral: warning: {args.token_file} is readable by other users; "
                  "revoke the token if they are not trusted", file=sys.stderr)
        return token or None
    if sys.stdin.isatty():
        import getpass

        token = getpass.getpass("join token (from `corral token create` on the controller): ")
    else:
        token = sys.stdin.readline()
    token = token.strip()
    if not token:
        print("corral: error: no join token: give --token-file FILE or the token on "
              "standard input", file=sys.stderr)
        return None
    return token


def _name_taken(why: str) -> bool:
    """The controller refused the node's name: another machine has it (controller/auth.py's
    enroll and the join route's `busy`)."""
    return " already joined (key " in why or "is served by a connected agent" in why


def cmd_join(args: argparse.Namespace) -> int:
    """Start an agent here that serves this machine as a node of a remote controller."""
    home = paths.corral_home()
    from corral.auth import (
        KIND_LOGIN,
        KIND_NODE,
        Credential,
        credential_path,
        parse_fingerprint,
        write_private,
    )

    if args.token is not None:
        print("corral: error: --token is refused: a command line is readable by every local "
              "user (/proc); give --token-file FILE (root-only) or the token on standard input",
              file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("corral: warning: joining as an ordinary user: whoever holds this machine's key "
              "can sign for any user, so only root should hold it", file=sys.stderr)
    if os.path.exists(paths.socket_path(home)) or read_pid("controller", home) is not None:
        print(f"corral: error: {home} holds a running controller; join from another "
              "CORRAL_HOME (or `corral down` first)", file=sys.stderr)
        return 1
    pid = read_pid("agent", home)
    if pid is not None:
        print(f"corral: error: an agent (pid {pid}) already runs for {home}; "
              "`corral down` first", file=sys.stderr)
        return 1
    m = re.fullmatch(r"https://(\[[0-9a-fA-F:.]+\]|[^/:\[\]]+):(\d+)/?", args.url)
    if not m:
        print(f"corral: error: the controller address must be https://HOST:PORT, not {args.url}",
              file=sys.stderr)
        return 1
    host, port = m.group(1).strip("[]"), int(m.group(2))
    url = f"https://{m.group(1)}:{port}"
    fingerprint = args.fingerprint
    if not fingerprint and not args.insecure_trust_first_use:
        print("corral: error: --fingerprint is required: it proves that the controller is the "
              "one you mean (`corral up --listen` and `corral status` print it on the "
              "controller's machine); --insecure-trust-first-use trusts whatever answers",
              file=sys.stderr)
        return 2
    if not fingerprint:
        try:
            fingerprint = _fetch_fingerprint(host, port)
        except OSError as e:
            print(f"corral: error: cannot reach {args.url}: {e}", file=sys.stderr)
            return 1
        print(f"corral: warning: --insecure-trust-first-use: trusting the certificate "
              f"{fingerprint} that {url} shows now, unverified", file=sys.stderr)
    try:
        digest = parse_fingerprint(fingerprint)
    except ValueError as e:
        print(f"corral: error: {e}", file=sys.stderr)
        return 1
    role = KIND_LOGIN if args.login_only else KIND_NODE
    name = args.name or os.uname().nodename.split(".")[0]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
        print(f"corral: error: Invalid node name specified: {name}", file=sys.stderr)
        return 1
    os.makedirs(home, mode=0o755, exist_ok=True)
    os.makedirs(paths.log_dir(home), exist_ok=True)
    key_file = credential_path(home)
    stored: Credential | None = None
    if not args.token_file and os.path.exists(key_file):
        try:
            with open(key_file) as f:
                stored = Credential.loads(f.read())
        except (OSError, ValueError):
            stored = None
        if stored is not None and (stored.kind != role or (args.name and stored.name != name)):
            print(f"corral: error: this machine joined as {stored.kind} {stored.name}; give a "
                  "new token (--token-file) to join otherwise", file=sys.stderr)
            return 1
    if stored is None:
        token = _read_token(args)
        if token is None:
            return 1
        import asyncio

        from corral.agent.remote import JoinError, enroll

        try:
            cred = asyncio.run(enroll(url, digest, token, role, name))
        except JoinError as e:
            print(f"corral: error: cannot join: {e}", file=sys.stderr)
            if role == KIND_NODE and not args.name and _name_taken(str(e)):
                print(f"corral: error: {name}, this machine's host name, is already a node of "
                      "the cluster: join under another name with --name NAME (the token was "
                      "not spent)", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"corral: error: cannot reach {url}: {e}", file=sys.stderr)
            return 1
        except Exception as e:  # aiohttp's connection errors
            print(f"corral: error: cannot reach {url}: {e}", file=sys.stderr)
            return 1
        # the machine's key: root-only directory, root-only file, never on a command line
        write_private(key_file, (cred.dumps() + "\n").encode())
    else:
        cred = stored
        print(f"corral: rejoining with this machine's key ({cred.kind} {cred.name})")
    name = cred.name
    error_file = os.path.join(home, "join.error")
    if os.path.exists(error_file):
        os.unlink(error_file)
    role_args = ["--login-only"] if cred.kind == KIND_LOGIN else ["--nodes", name]
    agent_log = os.path.join(paths.log_dir(home), "agent.log")
    agent = spawn(["corral.agent", "--home", home, "--controller-url", url,
                    "--fingerprint", fingerprint, "--token-file", key_file, *role_args],
                   agent_log, False)
    with open(paths.pid_file("agent", home), "w") as f:
        f.write(str(agent.pid))

    def ready() -> bool:
        try:
            if cred.kind == KIND_LOGIN:
                return client.get("/v1/ping") is not None
            nodes = client.get("/v1/nodes", names=name)["nodes"]
        except (client.NotRunning, client.ApiError, OSError):
            return False
        return any(n["name"] == name and n["responding"] for n in nodes)

    try:
        wait_for(lambda: agent.poll() is not None or ready(), 45, "join")
    except TimeoutError:
        print(f"corral: error: the agent did not join within 45 s; see {agent_log}", file=sys.stderr)
        stop_pid(agent.pid)
        return 1
    if agent.poll() is not None:
        try:
            with open(error_file) as f:
                why = f.read().strip()
        except OSError:
            why = f"the agent exited; see {agent_log}"
        print(f"corral: error: cannot join: {why}", file=sys.stderr)
        try:
            os.unlink(paths.pid_file("agent", home))
        except FileNotFoundError:
            pass
        return 1
    ping = client.get("/v1/ping")
    what = "as a login (submit) host" if cred.kind == KIND_LOGIN else f"as node {name}"
    print(f"corral: joined cluster {ping['cluster']} at {url} {what}")
    print(f"  state:  {home}")
    print(f"  key:    {key_file} (root only)")
    print(f"  socket: {paths.agent_socket_path(home)} (sbatch, squeue, srun… go through it)")
    print(f"  logs:   {paths.log_dir(home)}")
    print("  leave:  corral down")
    return 0


_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_ttl(text: str) -> float:
    """`90`, `90s`, `30m`, `12h`, `7d`, `2w` → seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"invalid --ttl {text!r} (e.g. 30m, 12h, 7d)")
    return float(m.group(1)) * _TTL_UNITS[m.group(2) or "s"]


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else "-"


def cmd_token(args: argparse.Namespace) -> int:
    if args.action == "create":
        try:
            ttl = parse_ttl(args.ttl)
        except ValueError as e:
            print(f"corral: error: {e}", file=sys.stderr)
            return 2
        answer = client.post("/v1/tokens", {"scope": "login" if args.login else "node",
                                            "ttl": ttl, "uses": args.uses, "node": args.node})
        _print_token(answer)
        return 0
    if args.action == "list":
        data = client.get("/v1/tokens")
        print(f"{'ID':<9} {'SCOPE':<6} {'STATUS':<8} {'USES':>4} {'EXPIRES':<19} {'NODE':<12} USED_BY")
        for t in sorted(data["tokens"], key=lambda t: t["created"]):
            print(f"{t['id']:<9} {t['scope']:<6} {t['status']:<8} {t['uses_left']:>4} "
                  f"{_when(t['expires']):<19} {t['node'] or '-':<12} {','.join(t['used_by']) or '-'}")
        return 0
    if not args.id:
        print("corral: error: corral token revoke ID", file=sys.stderr)
        return 2
    client.request("DELETE", f"/v1/tokens/{client.quote(args.id, safe='')}")
    print(f"corral: join token {args.id} revoked")
    return 0


def cmd_node(args: argparse.Namespace) -> int:
    if args.action == "list":
        data = client.get("/v1/machines")
        print(f"{'NAME':<16} {'KIND':<6} {'KEY':<17} {'ISSUED':<19} {'REVOKED':<19} ADDRESS")
        for k in sorted(data["machines"], key=lambda k: k["issued"]):
            print(f"{k['name']:<16} {k['kind']:<6} {k['id']:<17} {_when(k['issued']):<19} "
                  f"{_when(k['revoked']):<19} {k['addr'] or '-'}")
        return 0
    if not args.name:
        print("corral: error: corral node revoke NAME", file=sys.stderr)
        return 2
    answer = client.request("DELETE", f"/v1/machines/{client.quote(args.name, safe='')}")
    print(f"corral: revoked the key of {args.name} ({', '.join(answer['revoked'])}); it can no "
          "longer act for the cluster, other machines are untouched")
    return 0


