"""`corral`: the administrator's command (up, down, status, join, token, node, sim).

It lives apart from the thin Slurm commands (corral.cli), which must start fast.
"""

from __future__ import annotations

import argparse
import os
import sys

from corral import paths
from corral.admin import adopt, sim, validate, web, why
from corral.admin import images as images_cmd
from corral.admin.cluster import cmd_down, cmd_status, cmd_up
from corral.admin.joining import cmd_join, cmd_node, cmd_token
from corral.cli import client

PROG = "corral"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description="Run a Corral cluster on this machine.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the controller and the local agent")
    up.add_argument("--config", help="slurm.conf-syntax file to use (copied into $CORRAL_HOME)")
    up.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C stops")
    up.add_argument("--listen", metavar="HOST:PORT",
                    help="also accept agents and remote CLIs over TCP+TLS here (see corral join)")
    up.set_defaults(fn=cmd_up)
    join = sub.add_parser("join", help="serve this machine as a node of a cluster elsewhere")
    join.add_argument("url", help="the controller, https://HOST:PORT (as `corral up --listen` printed)")
    join.add_argument("--token", help=argparse.SUPPRESS)  # refused with a message: see cmd_join
    join.add_argument("--token-file", metavar="FILE",
                      help="file holding the join token (default: read it from standard input)")
    join.add_argument("--fingerprint", help="the controller certificate's SHA256:… fingerprint "
                      "(required)")
    join.add_argument("--insecure-trust-first-use", action="store_true",
                      help="without --fingerprint: trust whatever certificate answers (unsafe)")
    join.add_argument("--name", help="node name (default: this machine's short host name)")
    join.add_argument("--login-only", action="store_true",
                      help="register no node: only let this machine's users submit and query "
                           "(needs a token made with `corral token create --login`)")
    join.set_defaults(fn=cmd_join)
    tok = sub.add_parser("token", help="join tokens: create, list, revoke (controller's machine, root)")
    tok.add_argument("action", choices=["create", "list", "revoke"])
    tok.add_argument("id", nargs="?", help="the token id to revoke")
    tok.add_argument("--login", action="store_true", help="for a login (submit-only) host")
    tok.add_argument("--ttl", default="1h", help="lifetime: 30m, 12h, 7d… (default 1h)")
    tok.add_argument("--uses", type=int, default=1, help="how many machines may join with it (1)")
    tok.add_argument("--node", help="only a node of this name may join with it")
    tok.set_defaults(fn=cmd_token)
    node = sub.add_parser("node", help="joined machines' keys: list, revoke (controller's machine, root)")
    node.add_argument("action", choices=["list", "revoke"])
    node.add_argument("name", nargs="?", help="the node or login host whose key to revoke")
    node.set_defaults(fn=cmd_node)
    down = sub.add_parser("down", help="stop what `corral up` started")
    down.add_argument("--keep-jobs", action="store_true", help="leave running jobs running")
    down.set_defaults(fn=cmd_down)
    st = sub.add_parser("status", help="the cluster's nodes, jobs, and where its logs are")
    st.set_defaults(fn=cmd_status)
    web.add_parser(sub)  # corral web: a one-time link to the dashboard
    why.add_parser(sub)  # corral why JOBID: a pending reason with its numbers
    sim.add_parser(sub)  # corral sim TRACE: replay a trace on the scheduler in virtual time
    images_cmd.add_parser(sub)  # corral image: the node's container image cache
    adopt.add_parser(sub)  # corral pam-adopt: pam_slurm_adopt's check, for pam_exec
    validate.add_parser(sub)  # corral validate [NODES]: GPU, all-reduce, network, disk checks
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if args.cmd in ("up", "down", "join"):
        # these start and stop this user's own cluster, never the machine's (root's)
        os.environ["CORRAL_HOME"] = paths.own_home()
    try:
        rc = int(args.fn(args))
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return rc
    except (client.NotRunning, client.ApiError) as e:
        print(f"corral: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `corral status | head -3`: the reader left; nothing more to say.  Point stdout
        # at /dev/null so that the flush at exit does not fail again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 1
    except PermissionError as e:
        what = f"{e.strerror}" + (f": {e.filename}" if e.filename else "")
        if args.cmd in ("down", "up"):
            home = os.environ.get("CORRAL_HOME", "")
            verb = "stop" if args.cmd == "down" else "start"
            print(f"corral: error: the cluster of {home} is another user's: only its owner "
                  f"(or root) may {verb} it ({what})", file=sys.stderr)
        else:
            print(f"corral: error: {what}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
