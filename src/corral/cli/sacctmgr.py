"""sacctmgr: view and change accounts, users, QoS, associations and coordinators.

    sacctmgr [-i] [-n] [-P|-p] add|modify|delete|show|list ENTITY [SPECS] [where …] [set …]
    sacctmgr show assoc tree | show account withassoc | show user withcoord
    sacctmgr dump CLUSTER [file=PATH]      sacctmgr load [file=]PATH

The controller (controller/accounts.py) validates and applies a change and answers with
its change set (what was added, modified or deleted); this command splits the line into
names, `where` conditions and `set` values, prints the change in Slurm 22.05's words
(cli/sacctmgr_text.py), asks before committing (unless -i, as Slurm does), and prints
`show` tables with Slurm's column names, widths, `format=` (with `%N`) and -P/-p/-n.
Imports stay light: the stdlib's small modules and cli/client.py.
"""

from __future__ import annotations

import os
import sys

from corral.cli import client
from corral.cli.common_opts import answer_info_option
from corral.cli.sacctmgr_text import render_changes

PROG = "sacctmgr"

ENTITY_NAMES = {
    "account": ("account", "accounts", "acct", "accounts"), "association":
    ("association", "associations", "assoc", "assocs"), "cluster": ("cluster", "clusters"),
    "coordinator": ("coordinator", "coordinators", "coord", "coords"),
    "event": ("event", "events"),
    "qos": ("qos", "qoses"), "user": ("user", "users"),
}
COMMANDS = {"add": "add", "create": "add", "modify": "modify", "update": "modify",
            "delete": "delete", "remove": "delete", "show": "show", "list": "show",
            "dump": "dump", "load": "load"}

# (canonical name, shortest prefix accepted, header, width): Slurm's _get_print_field order
FIELDS: list[tuple[str, int, str, int]] = [
    ("Account", 3, "Account", 10), ("Acct", 4, "Account", 10),
    ("AdminLevel", 2, "Admin", 9), ("Cluster", 2, "Cluster", 10),
    ("Coordinators", 2, "Coord Accounts", 20), ("ControlHost", 8, "ControlHost", 15),
    ("ControlPort", 8, "ControlPort", 12), ("DefaultAccount", 8, "Def Acct", 10),
    ("DefaultQOS", 8, "Def QOS", 9), ("Description", 3, "Descr", 20),
    ("Flags", 2, "Flags", 20), ("GraceTime", 3, "GraceTime", 10),
    ("GrpTRES", 7, "GrpTRES", 13), ("GrpTRESMins", 7, "GrpTRESMins", 13),
    ("GrpTRESRunMins", 7, "GrpTRESRunMins", 13), ("GrpJobs", 4, "GrpJobs", 7),
    ("GrpSubmitJobs", 4, "GrpSubmit", 9), ("GrpWall", 4, "GrpWall", 11), ("ID", 2, "ID", 6),
    ("MaxTRES", 7, "MaxTRES", 13), ("MaxTRESPerJob", 7, "MaxTRES", 13),
    ("MaxTRESPerNode", 11, "MaxTRESPerNode", 14), ("MaxTRESMinsPerJob", 11, "MaxTRESMins", 13),
    ("MaxTRESMins", 11, "MaxTRESMins", 13), ("MaxTRESPerAccount", 11, "MaxTRESPA", 13),
    ("MaxTRESPerAcct", 11, "MaxTRESPA", 13), ("MaxTRESPA", 9, "MaxTRESPA", 13),
    ("MaxTRESPerUser", 11, "MaxTRESPU", 13), ("MaxTRESPU", 9, "MaxTRESPU", 13),
    ("MaxJobs", 4, "MaxJobs", 7), ("MaxJobsPerAccount", 9, "MaxJobsPA", 9),
    ("MaxJobsPerAcct", 9, "MaxJobsPA", 9), ("MaxJobsPA", 9, "MaxJobsPA", 9),
    ("MaxJobsPerUser", 9, "MaxJobsPU", 9), ("MaxJobsPU", 9, "MaxJobsPU", 9),
    ("MaxSubmitJobs", 4, "MaxSubmit", 9), ("MaxSubmitJobsPerAccount", 12, "MaxSubmitPA", 11),
    ("MaxSubmitJobsPerAcct", 12, "MaxSubmitPA", 11), ("MaxSubmitPA", 11, "MaxSubmitPA", 11),
    ("MaxSubmitJobsPerUser", 12, "MaxSubmitPU", 11), ("MaxSubmitPU", 11, "MaxSubmitPU", 11),
    ("MaxWallDurationPerJob", 4, "MaxWall", 11), ("MinTRESPerJob", 7, "MinTRES", 13),
    ("Name", 2, "Name", 10), ("Organization", 1, "Org", 20), ("ParentID", 7, "ParentID", 8),
    ("ParentName", 7, "ParentName", 10), ("Partition", 4, "Partition", 10),
    ("PreemptMode", 8, "PreemptMode", 11), ("PreemptExemptTime", 8, "PreemptExemptTime", 19),
    ("Preempt", 7, "Preempt", 10), ("Priority", 3, "Priority", 10),
    ("QOSLevel", 3, "QOS", 20), ("RPC", 1, "RPC", 5), ("Share", 1, "Share", 9),
    ("FairShare", 2, "Share", 9), ("UsageFactor", 6, "UsageFactor", 11),
    ("UsageThreshold", 6, "UsageThres", 10), ("User", 1, "User", 10),
]
# sacctmgr list event's own columns (Slurm: NodeName -15, dates 19, State 6, Reason 30)
EVENT_FIELDS: list[tuple[str, int, str, int]] = [
    ("Cluster", 2, "Cluster", 10), ("NodeNames", 5, "NodeName", -15),
    ("TimeStart", 7, "TimeStart", 19), ("Start", 3, "TimeStart", 19),
    ("TimeEnd", 6, "TimeEnd", 19), ("End", 2, "TimeEnd", 19), ("State", 1, "State", 6),
    ("Reason", 1, "Reason", 30), ("User", 1, "User", 10), ("Duration", 2, "Duration", 13),
]

DEFAULT_FORMAT = {
    "association": "Cluster,Account,User,Part,Share,Priority,GrpJ,GrpTRES,GrpS,GrpWall,"
                   "GrpTRESMins,MaxJ,MaxTRES,MaxTRESPerN,MaxS,MaxW,MaxTRESMins,QOS,DefaultQOS,"
                   "GrpTRESRunMins",
    "account": "Acc,Des,O",
    "account+assoc": "Acc,Des,O,Cl,ParentN,U,Share,Priority,GrpJ,GrpTRES,GrpS,GrpWall,"
                     "MaxJ,MaxTRES,MaxS,MaxW,QOS,DefaultQOS",
    "user": "U,DefaultA,Ad",
    "user+assoc": "U,DefaultA,Ad,Cl,Acc,Part,Share,Priority,MaxJ,MaxTRES,MaxS,MaxW,QOS,"
                  "DefaultQOS",
    "qos": "Name,Prio,GraceT,Preempt,PreemptE,PreemptM,Flags%40,UsageThres,UsageFactor,"
           "GrpTRES,GrpTRESMins,GrpTRESRunMins,GrpJ,GrpS,GrpW,MaxTRES,MaxTRESPerN,MaxTRESMins,"
           "MaxW,MaxTRESPerUser,MaxJobsPerUser,MaxSubmitJobsPerUser,MaxTRESPerAcct,"
           "MaxJobsPerAcct,MaxSubmitJobsPerAcct,MinTRES",
    "cluster": "Cl,Controlh,Controlp,RPC,Fa,GrpJ,GrpTRES,GrpS,MaxJ,MaxTRES,MaxS,MaxW,QOS,"
               "DefaultQOS",
    "coordinator": "Acc,U",
}


class UsageError(Exception):
    """A bad command line: the message is what sacctmgr prints; exit 1."""


def field_for(name: str, table: list[tuple[str, int, str, int]] | None = None
              ) -> tuple[str, int]:
    """A format item → (header, width); `%N` sets the width (negative: left-justified)."""
    base, pct, width = name.partition("%")
    low = base.lower()
    for canon, shortest, header, w in FIELDS if table is None else table:
        if len(low) >= shortest and canon.lower().startswith(low):
            if pct:
                try:
                    n = int(width)
                except ValueError:
                    raise UsageError(f" Invalid field width: {name}") from None
                if n:
                    w = n
            return header, w
    raise UsageError(f" Unknown field '{base}'")


def render(rows: list[dict[str, str]], fields: list[tuple[str, int]], *, header: bool,
           parsable: int) -> str:
    """print_fields: right-justified columns of `width` (negative: left) with a trailing
    space, values cut with '+'; -p: 'a|b|', -P: 'a|b'."""
    out: list[str] = []

    def cell(text: str, width: int, last: bool) -> str:
        if parsable == 2 and last:
            return text
        if parsable:
            return text + "|"
        w = abs(width)
        if len(text) > w:
            text = text[:w - 1] + "+"
        return (text.rjust(w) if width > 0 else text.ljust(w)) + " "

    n = len(fields)
    if header:
        out.append("".join(cell(h, w, i == n - 1) for i, (h, w) in enumerate(fields)))
        if not parsable:
            out.append("".join("-" * abs(w) + " " for _, w in fields))
    for r in rows:
        out.append("".join(cell(r.get(h, ""), w, i == n - 1) for i, (h, w) in enumerate(fields)))
    return "".join(line + "\n" for line in out)


# the entities Slurm's sacctmgr knows for each command, and what it says for another word
_SLURM_ENTITIES = {
    "add": (("account", "cluster", "coordinator", "federation", "qos", "resource", "user"),
            '"Account", "Cluster", "Coordinator", "Federation", "QOS", "Resource", or "User"'),
    "show": (("accounts", "associations", "clusters", "configuration", "events", "federation",
              "problems", "runawayjobs", "orphanjobs", "lostjobs", "qos", "resource",
              "reservations", "resv", "stats", "transactions", "txn", "users", "wckeys", "tres"),
             '"Account", "Association", "Cluster", "Configuration",\n"Event", "Federation", '
             '"Problem", "QOS", "Resource", "Reservation",\n"RunAwayJobs", "Stats", '
             '"Transaction", "TRES", "User", or "WCKey"'),
    "modify": (("account", "cluster", "federation", "job", "qos", "resource", "user"),
               '"Account", "Cluster", "Federation", "Job", "QOS", "Resource" or "User"'),
    "delete": (("account", "cluster", "coordinator", "federation", "qos", "resource", "user"),
               '"Account", "Cluster", "Coordinator", "Federation", "QOS", "Resource", or "User"'),
}


def _entity(word: str, cmd: str = "show") -> str:
    low = word.lower()
    for canon, names in ENTITY_NAMES.items():
        if low in names or (len(low) >= 3 and canon.startswith(low)):
            return canon
    known, listed = _SLURM_ENTITIES[cmd]
    if not any(name.startswith(low) for name in known):
        verb = "list" if cmd == "show" else cmd
        raise UsageError(f"No valid entity in {verb} command\nInput line must include {listed}")
    raise UsageError(f" Unknown entity type: {word}")


def parse_specs(op: str, words: list[str]) -> dict[str, object]:
    """Split `name … key=value … where … set …` into names, where, set and show options."""
    names: list[str] = []
    where: dict[str, str] = {}
    sets: dict[str, str] = {}
    options: dict[str, bool] = {}
    fmt: str | None = None
    target = where
    for w in words:
        low = w.lower()
        if low == "where":
            target = where
            continue
        if low == "set":
            target = sets
            continue
        if "=" not in w:
            if low in ("withassoc", "withassocs", "withcoord", "withcoords", "tree",
                       "withdeleted", "withsubaccounts", "wopl", "wolimits", "wopinfo"):
                options[low.rstrip("s").replace("withsubaccount", "withsub")] = True
                continue
            names.extend(x for x in w.split(",") if x)
            continue
        key, _, value = w.partition("=")
        if key.endswith("+") or key.endswith("-"):
            pass  # QOS+=x / QOS-=x: the controller reads the operator from the key
        if key.lower() == "format":
            fmt = value
            continue
        if value.startswith(("'", '"')) and value.endswith(value[0]) and len(value) > 1:
            value = value[1:-1]
        target[key] = value
    if op == "modify" and not sets:
        raise UsageError(" You didn't give me anything to set")
    return {"names": names, "where": where, "set": sets, "options": options, "format": fmt}


def commit_check(warning: str) -> bool:
    """Slurm's commit_check: ask, wait up to 30 s for y/n on stdin."""
    import select

    sys.stdout.write(f"{warning} (You have 30 seconds to decide)\n")
    while True:
        sys.stdout.write("(N/y): ")
        sys.stdout.flush()
        ready, _, _ = select.select([sys.stdin], [], [], 30)
        if not ready:
            sys.stdout.write("timeout\n")
            return False
        line = sys.stdin.readline()
        sys.stdout.write("\n")
        c = line[:1]
        if c in ("Y", "y"):
            return True
        if c in ("N", "n", "\n", ""):
            return False
        sys.stdout.write("Y or N please\n")


def usage() -> str:
    """sacctmgr's help, which `-h`, `--help`, `help` and `--usage` all print (sacctmgr.c
    maps `--usage` to `-h`): its sections are Slurm's, the words Corral's own, and only
    what Corral's sacctmgr does is listed."""
    return (
        "sacctmgr [<OPTION>] [<COMMAND>]\n"
        "    Valid <OPTION> values are:\n"
        "     -h or --help: equivalent to \"help\" command\n"
        "     -i or --immediate: commit changes immediately without asking\n"
        "     -n or --noheader: no header will be added to the beginning of output\n"
        "     -p or --parsable: output will be '|' delimited with a '|' at the end\n"
        "     -P or --parsable2: output will be '|' delimited without a '|' at the end\n"
        "     -Q or --quiet, -r or --readonly, -v or --verbose: accepted, change nothing\n"
        "     -s or --associations: list users and accounts with their associations\n"
        "     -V or --version: print version information\n"
        "\n"
        "  Valid <COMMAND> values are:\n"
        "     add <ENTITY> <SPECS>     add an entity (create is the same)\n"
        "     delete <ENTITY> <SPECS>  remove entities (remove is the same)\n"
        "     dump <CLUSTER> [File=F]  write a cluster's associations to a flat file\n"
        "     help                     print this text\n"
        "     list <ENTITY> [<SPECS>]  show entities (show is the same)\n"
        "     load [File=]F            read a flat file back\n"
        "     modify <ENTITY> <SPECS>  change entities (update is the same)\n"
        "\n"
        "  <ENTITY> may be \"account\", \"association\", \"cluster\", \"coordinator\",\n"
        "       \"event\", \"qos\" or \"user\".\n"
        "\n"
        "  <SPECS> are different for each command entity pair.\n"
        "       list account       - Names=, WithAssoc (with Clusters=, Users=,\n"
        "                            Partitions=)\n"
        "       add account        - Cluster=, Description=, Names=, Organization=,\n"
        "                            Parent=, Fairshare=, QOS=, DefaultQOS= and limits.\n"
        "       modify account     - (where) Names=, Cluster=\n"
        "                            (set) Description=, Organization=, Parent=,\n"
        "                            Fairshare=, QOS=, DefaultQOS= and limits.\n"
        "       delete account     - Names=, Cluster=\n"
        "\n"
        "       list associations  - Accounts=, Clusters=, Partitions=, Users=, Tree\n"
        "       modify association - as modify account or modify user\n"
        "       delete association - Accounts=, Users=, Partitions=\n"
        "\n"
        "       list cluster       - Names=\n"
        "       add cluster        - Names=, Fairshare=, QOS= and limits\n"
        "       modify cluster     - (where) Names= (set) Fairshare=, QOS= and limits\n"
        "       delete cluster     - Names=\n"
        "\n"
        "       add coordinator    - Accounts=, Names=\n"
        "       delete coordinator - Accounts=, Names=\n"
        "\n"
        "       list events        - Start=, End=, Nodes=\n"
        "\n"
        "       list qos           - Names=\n"
        "       add qos            - Names=, Description=, Flags=, GraceTime=, Preempt=,\n"
        "                            PreemptMode=, Priority=, UsageFactor= and limits\n"
        "       modify qos         - (where) Names= (set) as add qos\n"
        "       delete qos         - Names=\n"
        "\n"
        "       list user          - Names=, WithAssoc (with Accounts=, Clusters=,\n"
        "                            Partitions=)\n"
        "       add user           - Accounts=, AdminLevel=, Clusters=, DefaultAccount=,\n"
        "                            Names=, Partitions=, Fairshare=, QOS= and limits\n"
        "       modify user        - (where) Names=, Accounts=, Clusters=, Partitions=\n"
        "                            (set) AdminLevel=, DefaultAccount=, Fairshare=,\n"
        "                            QOS=, DefaultQOS= and limits\n"
        "       delete user        - Names=, Accounts=, Clusters=, Partitions=\n"
        "\n"
        "  Limits: GrpJobs=, GrpSubmitJobs=, GrpTRES=, GrpTRESMins=, GrpTRESRunMins=,\n"
        "       GrpWall=, MaxJobs=, MaxSubmitJobs=, MaxTRES=, MaxTRESPerNode=,\n"
        "       MaxTRESMins=, MaxWall=; a QoS also MaxJobsPerUser=,\n"
        "       MaxSubmitJobsPerUser=, MaxTRESPerUser=, MinTRESPerJob=.\n"
        "\n"
        "  All commands, entities and options are case-insensitive; account names,\n"
        "  descriptions and organizations are stored lower-cased.\n\n")


def _main(argv: list[str]) -> int:
    header = True
    immediate = False
    with_assoc = False
    parsable = 0
    rest: list[str] = []
    posix_scan = bool(os.environ.get("POSIXLY_CORRECT"))  # glibc's getopt stops at an operand
    i = 0
    while i < len(argv):
        a = argv[i]
        # sacctmgr reads its options with GNU getopt: they may follow the command too
        # (`sacctmgr show assoc -n -P`), up to a `--`
        if a == "--":
            rest.extend(argv[i + 1:])
            break
        if a == "help" and not rest:
            sys.stdout.write(usage())
            return 0
        if not a.startswith("-") or len(a) == 1 or (rest and posix_scan):
            rest.append(a)
        elif a in ("-i", "--immediate"):
            immediate = True
        elif a in ("-n", "--noheader"):
            header = False
        elif a in ("-P", "--parsable2"):
            parsable = 2
        elif a in ("-p", "--parsable"):
            parsable = 1
        elif a in ("-s", "--associations"):
            with_assoc = True
        elif a in ("-Q", "--quiet", "-v", "--verbose", "-r", "--readonly"):
            pass
        elif answer_info_option(a, usage(), usage(), help_opts=("-h", "--help", "help")):
            return 0
        elif not a.startswith("--"):
            # combined short flags: -in, -nP
            flags = a[1:]
            if all(c in "inPpQvrs" for c in flags):
                immediate |= "i" in flags
                header &= "n" not in flags
                with_assoc |= "s" in flags
                parsable = 2 if "P" in flags else (1 if "p" in flags else parsable)
            else:
                sys.stderr.write(f"sacctmgr: invalid option -- '{flags[0]}'\n"
                                 "Try \"sacctmgr --help\" for more information\n")
                return 1
        else:
            rest.append(a)
        i += 1
    if not rest:
        sys.stdout.write(usage())
        return 0
    cmd = COMMANDS.get(rest[0].lower())
    if cmd is None:
        sys.stderr.write(f"invalid keyword: {rest[0]}\n")
        return 1
    try:
        if cmd == "dump":
            return _dump(rest[1:])
        if cmd == "load":
            return _load(rest[1:], immediate)
        if len(rest) < 2:
            raise UsageError(f" Need an entity to {cmd}")
        entity = _entity(rest[1], cmd)
        spec = parse_specs(cmd, rest[2:])
        if with_assoc:
            spec["options"] = {**dict(spec["options"]), "withassoc": True}  # type: ignore[call-overload]
        if cmd == "show" and entity == "event":
            return _events(spec, header, parsable)
        if cmd == "show":
            return _show(entity, spec, header, parsable)
        if entity == "event":
            raise UsageError(f" Can't {cmd} events")
        return _change(cmd, entity, spec, immediate)
    except UsageError as e:
        sys.stderr.write(f"{e}\n")
        return 1


def _refused(e: client.ApiError) -> int:
    sys.stderr.write(e.message.rstrip("\n") + "\n")
    return 1


def _change_text(ans: dict[str, object]) -> str:
    changes = ans.get("changes")
    return render_changes(changes) if isinstance(changes, dict) else ""


def _change(cmd: str, entity: str, spec: dict[str, object], immediate: bool) -> int:
    req = {"op": cmd, "entity": entity, "names": spec["names"], "where": spec["where"],
           "set": spec["set"], "commit": immediate}
    try:
        ans = client.post("/v1/accounts", req)
    except client.ApiError as e:
        return _refused(e)
    sys.stdout.write(_change_text(ans))
    if not ans.get("changed"):
        return 1  # Slurm: "Nothing new added/modified/deleted" is an error exit
    if immediate:
        return 0
    if not commit_check("Would you like to commit changes?"):
        sys.stdout.write(" Changes Discarded\n")
        return 0
    req["commit"] = True
    try:
        client.post("/v1/accounts", req)
    except client.ApiError as e:
        return _refused(e)
    return 0


def _show(entity: str, spec: dict[str, object], header: bool, parsable: int) -> int:
    options = dict(spec["options"])  # type: ignore[call-overload]
    fmt = spec["format"]
    names = list(spec["names"])  # type: ignore[call-overload]
    if entity == "association" and "tree" in names:
        names.remove("tree")
        options["tree"] = True
    where = dict(spec["where"])  # type: ignore[call-overload]
    try:
        ans = client.post("/v1/accounts", {"op": "show", "entity": entity, "names": names,
                                           "where": where, "options": options})
    except client.ApiError as e:
        return _refused(e)
    if fmt is None:
        key = entity
        if entity in ("account", "user") and options.get("withassoc"):
            key += "+assoc"
        fmt = DEFAULT_FORMAT[key]
        if options.get("withcoord") and entity in ("account", "user"):
            fmt += ",Coord"
    fields = [field_for(f) for f in str(fmt).split(",") if f]
    if options.get("tree"):
        fields = [(h, -20 if h == "Account" and w == 10 else w) for h, w in fields]
    sys.stdout.write(render(list(ans.get("rows", [])), fields, header=header,
                            parsable=parsable))
    return 0


def _events(spec: dict[str, object], header: bool, parsable: int) -> int:
    """sacctmgr list event: node down/drain periods; by default those of the past day."""
    import time

    from corral.model.timeparse import TimeParseError, parse_time

    where = {k.lower(): v for k, v in dict(spec["where"]).items()}  # type: ignore[call-overload]
    now = time.time()
    try:
        start = parse_time(where["start"], now, past=True) if "start" in where else None
        end = parse_time(where["end"], now) if "end" in where else None
    except TimeParseError:
        raise UsageError(" Invalid time format") from None
    for k in where:
        if k not in ("start", "end", "nodes", "node", "nodename"):
            raise UsageError(f" Unknown condition: {k}={where[k]}")
    if start is None and not spec["names"]:
        lt = time.localtime(now)
        start = int(time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday - 1, 0, 0, 0, 0, 0, -1)))
    nodes = where.get("nodes") or where.get("node") or where.get("nodename")
    try:
        ans = client.get("/v1/accounts/events", start=start, end=end, nodes=nodes)
    except client.ApiError as e:
        return _refused(e)
    fmt = spec["format"] or "Cluster,NodeName,Start,End,State,Reason,User"
    fields = [field_for(f, EVENT_FIELDS) for f in str(fmt).split(",") if f]

    def when(t: object) -> str:
        if not t:
            return "Unknown"
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(t)))  # type: ignore[arg-type]

    def duration(e: dict[str, object]) -> str:
        secs = int(float(e["end"] or now) - float(e["start"] or now))  # type: ignore[arg-type]
        d, r = divmod(max(0, secs), 86400)
        return f"{d}-{r // 3600:02d}:{r % 3600 // 60:02d}:{r % 60:02d}" if d else \
            f"{r // 3600:02d}:{r % 3600 // 60:02d}:{r % 60:02d}"
    rows = [{"Cluster": str(e["cluster"]), "NodeName": str(e["node"]),
             "TimeStart": when(e["start"]), "TimeEnd": when(e["end"]),
             "State": str(e["state"]), "Reason": str(e["reason"]), "User": str(e["user"]),
             "Duration": duration(e)} for e in ans.get("events", [])]
    sys.stdout.write(render(rows, fields, header=header, parsable=parsable))
    return 0


def _dump(words: list[str]) -> int:
    cluster = None
    path = None
    for w in words:
        k, sep, v = w.partition("=")
        if sep and k.lower() in ("file", "f"):
            path = v
        elif sep and k.lower().startswith("cluster"):
            cluster = v
        elif not sep and cluster is None:
            cluster = w
        else:
            raise UsageError(f" Unknown option: {w}")
    if not cluster:
        raise UsageError(" We need a cluster to dump.\n"
                         " Use keyword 'cluster=' or just the name of the cluster")
    try:
        ans = client.get("/v1/accounts/dump", cluster=cluster)
    except client.ApiError as e:
        return _refused(e)
    text = ans.get("text", "")
    path = path or f"{cluster}.cfg"
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        sys.stderr.write(f" Can't open file {path}: {e.strerror}\n")
        return 1
    sys.stdout.write(f"sacctmgr: Cluster - '{cluster}'\n")
    return 0


def _load(words: list[str], immediate: bool) -> int:
    path = None
    for w in words:
        k, sep, v = w.partition("=")
        if sep and k.lower() in ("file", "f"):
            path = v
        elif not sep and path is None:
            path = w
        else:
            raise UsageError(f" Unknown option: {w}")
    if not path:
        raise UsageError(" No filename given")
    try:
        with open(os.path.expanduser(path)) as f:
            text = f.read()
    except OSError as e:
        sys.stderr.write(f" Unable to read \"{path}\": {e.strerror}\n")
        return 1
    try:
        ans = client.post("/v1/accounts/load", {"text": text, "commit": immediate})
    except client.ApiError as e:
        return _refused(e)
    sys.stdout.write(_change_text(ans))
    if immediate:
        return 0
    if not commit_check("Would you like to commit changes?"):
        sys.stdout.write(" Changes Discarded\n")
        return 0
    try:
        client.post("/v1/accounts/load", {"text": text, "commit": True})
    except client.ApiError as e:
        return _refused(e)
    return 0


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
