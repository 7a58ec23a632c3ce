"""sshare: shares, usage and fairshare factors of the association tree (Slurm 22.05).

Default columns Account, User, RawShares, NormShares, RawUsage, EffectvUsage, FairShare;
-l adds NormUsage, LevelFS, GrpTRESMins, TRESRunMins.  Account lines are always shown;
user lines are the caller's own unless -a (all users) or -u names users.  -A limits the
accounts, -P/-p print `|`-separated fields, -n drops the header, -o picks the columns.
"""

from __future__ import annotations

import os
import sys

from corral.cli import client
from corral.cli import gnugetopt as getopt
from corral.cli.common_opts import answer_info_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROG = "sshare"

# column name (lower-case) -> (header, width, left-aligned)
COLUMNS: dict[str, tuple[str, int, bool]] = {
    "account": ("Account", 20, True),
    "user": ("User", 10, False),
    "partition": ("Partition", 12, False),
    "rawshares": ("RawShares", 10, False),
    "normshares": ("NormShares", 11, False),
    "rawusage": ("RawUsage", 11, False),
    "normusage": ("NormUsage", 11, False),
    "effectvusage": ("EffectvUsage", 13, False),
    "fairshare": ("FairShare", 10, False),
    "levelfs": ("LevelFS", 10, False),
    "grptresmins": ("GrpTRESMins", 30, True),
    "tresrunmins": ("TRESRunMins", 30, True),
}
DEFAULT = ["account", "user", "rawshares", "normshares", "rawusage", "effectvusage",
           "fairshare"]
LONG = ["account", "user", "rawshares", "normshares", "rawusage", "normusage",
        "effectvusage", "fairshare", "levelfs", "grptresmins", "tresrunmins"]

USAGE = ("Usage: sshare [-A Accounts] [-a] [-l] [-n] [-o format] [-P] [-p] [-u Users] "
         "[-U] [-v] [-V]\n")
HELP = USAGE + """
  -A or --accounts=      display specific accounts (comma separated list)
  -a or --all            list all users
  -h or --noheader       omit header from output
  -l or --long           include normalized usage in output
  -n or --noheader       omit header from output
  -o or --format=        comma separated list of fields
  -P or --parsable2      '|' delimited output without a trailing '|'
  -p or --parsable       '|' delimited output with a trailing '|'
  -U or --Users          display only user information
  -u or --users=         display specific users (comma separated list)
  --help                 display this help
  --usage                display a brief summary of sshare options
"""

# GrpTRESMins/TRESRunMins print TRES by Slurm's ids order
_TRES_ORDER = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")


def _tres(d: dict[str, Any]) -> str:
    def key(name: str) -> tuple[int, str]:
        return (_TRES_ORDER.index(name) if name in _TRES_ORDER else len(_TRES_ORDER), name)
    return ",".join(f"{k}={int(d[k])}" for k in sorted(d, key=key))


def values(row: dict[str, Any], fair_tree: bool) -> dict[str, str]:
    user = row["user"]
    is_root = row["depth"] == 0 and not user
    indent = " " * row["depth"]
    fs = row["fairshare"]
    level = float(row["level_fs"])  # a number, or "inf"/"nan" (JSON has no infinity)
    return {
        "account": indent + row["account"],
        "user": user,
        "partition": row.get("partition", ""),
        "rawshares": "" if is_root else str(row["raw_shares"]),
        # the root line shows no raw shares and 0 normalised shares, as Slurm's does
        "normshares": f"{row['norm_shares']:.6f}" if not is_root else f"{0.0:.6f}",
        "rawusage": str(int(row["raw_usage"])),
        "normusage": f"{row['norm_usage']:.6f}",
        "effectvusage": f"{row['effective_usage']:.6f}",
        "fairshare": f"{fs:.6f}" if user or not fair_tree else "",
        "levelfs": ("inf" if level == float("inf") else f"{level:.6f}") if user else "",
        "grptresmins": _tres(row.get("grp_tres_mins") or {}),
        "tresrunmins": _tres(row.get("tres_run_mins") or {}),
    }


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _run, argv)


def _caller() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _run(args: list[str]) -> int:
    try:
        opts, rest = getopt.gnu_getopt(args, "A:ahlno:Ppu:UvVM:", [
            "accounts=", "all", "noheader", "long", "format=", "parsable", "parsable2",
            "users=", "Users", "verbose", "version", "help", "usage", "clusters=",
            "partition"])
    except getopt.GetoptError as e:
        sys.stderr.write(f"{PROG}: {e.msg}\nTry \"sshare --help\" for more information\n")
        return 1
    if rest:
        sys.stderr.write(f"{PROG}: error: Unrecognized option: {rest[0]}\n{USAGE}")
        return 1
    all_users, header, long, users_only = False, True, False, False
    sep: str | None = None
    trailing = False
    accounts: set[str] | None = None
    users: set[str] | None = None
    fields: list[str] | None = None
    for o, v in opts:
        if o in ("-A", "--accounts"):
            accounts = {x for x in v.split(",") if x}
        elif o in ("-a", "--all"):
            all_users = True
        elif o in ("-h", "-n", "--noheader"):
            header = False
        elif o in ("-l", "--long"):
            long = True
        elif o in ("-o", "--format"):
            fields = []
            for f in v.split(","):
                name = f.split("%", 1)[0].strip().lower()
                if name not in COLUMNS:
                    sys.stderr.write(f"{PROG}: error: Invalid field requested: \"{f}\"\n")
                    return 1
                fields.append(f)
        elif o in ("-P", "--parsable2"):
            sep, trailing = "|", False
        elif o in ("-p", "--parsable"):
            sep, trailing = "|", True
        elif o in ("-u", "--users"):
            users = {x for x in v.split(",") if x}
        elif o in ("-U", "--Users"):
            users_only = True
        elif answer_info_option(o, HELP, USAGE):
            return 0
    data = client.get("/v1/sshare")
    fair_tree = bool(data.get("fair_tree", True))
    me = _caller()
    cols: list[tuple[str, int, bool, str]] = []
    for f in fields if fields is not None else (LONG if long else DEFAULT):
        name, _, width = f.partition("%")
        key = name.strip().lower()
        head, w, left = COLUMNS[key]
        if width:
            try:
                w = abs(int(width))
            except ValueError:
                sys.stderr.write(f"{PROG}: error: Invalid field requested: \"{f}\"\n")
                return 1
        cols.append((key, w, left, head))
    rows = []
    for row in data.get("rows", []):
        user = row["user"]
        if accounts is not None and row["account"] not in accounts:
            continue
        if user:
            if users is not None:
                if user not in users:
                    continue
            elif not all_users and user != me:
                continue
        elif users_only:
            continue
        rows.append(values(row, fair_tree))
    out = []
    if sep is not None:
        end = sep if trailing else ""
        if header:
            out.append(sep.join(h for _, _, _, h in cols) + end)
        out += [sep.join(r[k] for k, _, _, _ in cols) + end for r in rows]
    else:
        def line(cells: list[tuple[str, int, bool]]) -> str:
            return " ".join(t[:w].ljust(w) if left else t[:w].rjust(w) for t, w, left in cells) + " "
        if header:  # each header aligned as its column is (print_fields_header)
            out.append(line([(h, w, left) for _, w, left, h in cols]))
            out.append(" ".join("-" * w for _, w, _, _ in cols) + " ")
        out += [line([(r[k], w, left) for k, w, left, _ in cols]) for r in rows]
    sys.stdout.write("".join(x + "\n" for x in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
