"""sreport: usage reports over a time range (Slurm 22.05's layout).

    sreport [-n] [-P|-p] [-t minutes|hours|seconds|percent|minper|hourper] [-T cpu,gres/gpu]
            cluster utilization            [start=TIME] [end=TIME]
            cluster AccountUtilizationByUser [accounts=A,B] [users=U,V] [start=] [end=]
            user topusage                  [topcount=N] [accounts=] [users=] [start=] [end=]

The numbers come from the controller (/v1/sreport): TRES-seconds of each job's
allocation within the window, the nodes' capacity and their down/drained periods.
The window defaults to yesterday (midnight to midnight) and is rounded to the hour.
"""

from __future__ import annotations

import pwd
import sys
import time

from corral.cli import client
from corral.cli import gnugetopt as getopt
from corral.cli.common_opts import answer_info_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROG = "sreport"
BANNER = "-" * 80

USAGE = """\
sreport [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -n or --noheader: Don't print header lines.
     -p or --parsable: output will be '|' delimited with a '|' at the end
     -P or --parsable2: output will be '|' delimited without a '|' at the end
     -t <time_format>: Second, Minute, Hour, Percent, SecPer, MinPer, HourPer
     -T or --tres: comma separated list of TRES (cpu by default), e.g. gres/gpu
     -h or --help: equivalent to "help" command
     -V or --version: equivalent to "version" command

  <keyword> may be omitted from the execute line and sreport will execute
  in interactive mode (not in Corral: give the command on the line).

    Valid <COMMAND> values are:
     cluster AccountUtilizationByUser [Accounts=] [Users=] [Start=] [End=]
     cluster Utilization [Start=] [End=]
     user TopUsage [TopCount=] [Accounts=] [Users=] [Start=] [End=]
"""

TIME_FORMATS = {"seconds": ("Seconds", 1), "minutes": ("Minutes", 60),
                "hours": ("Hours", 3600), "percent": ("Percentage of Total", 0),
                "secper": ("Seconds/Percentage of Total", 1),
                "minper": ("Minutes/Percentage of Total", 60),
                "hourper": ("Hours/Percentage of Total", 3600)}


class ReportError(Exception):
    pass


def time_format(text: str) -> str:
    """-t: case-insensitive, abbreviations allowed (s, min, hours, per, minper, ...)."""
    t = text.lower()
    if t in TIME_FORMATS:
        return t
    for name in ("seconds", "minutes", "hours", "percent"):  # the plain ones first
        if t and name.startswith(t):
            return name
    for name in ("secper", "minper", "hourper"):
        if t and name.startswith(t):
            return name
    raise ReportError(f"unknown time format {text}")


def value(secs: float, total: float, fmt: str) -> str:
    """A TRES-seconds amount as -t prints it."""
    _, div = TIME_FORMATS[fmt]
    pct = f"{100.0 * secs / total:.2f}%" if total else "0.00%"
    if fmt == "percent":
        return pct
    amount = str(int(secs // div))
    return f"{amount}({pct})" if fmt.endswith("per") else amount


def stamp(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


def _hour(ts: float) -> float:
    lt = time.localtime(ts)
    return time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, lt.tm_hour, 0, 0, 0, 0, -1))


def window(params: dict[str, str], now: float) -> tuple[float, float]:
    from corral.model.timeparse import TimeParseError, parse_time

    lt = time.localtime(now)
    midnight = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))
    start, end = midnight - 86400, midnight
    try:
        if "start" in params:
            start = float(parse_time(params["start"], now, past=True))
        if "end" in params:
            end = float(parse_time(params["end"], now, past=True))
    except TimeParseError:
        raise ReportError("Invalid time specification") from None
    start, end = _hour(start), _hour(end)
    if end <= start:
        raise ReportError("Start time must be before end time")
    return start, end


def _proper_name(user: str) -> str:
    try:
        return pwd.getpwnam(user).pw_gecos.split(",")[0]
    except KeyError:
        return ""


class Table:
    """A report's table; `fields` (format=Name[%W],...) picks and sizes its columns."""

    def __init__(self, cols: list[tuple[str, int, bool]], sep: str | None, trailing: bool,
                 header: bool, fields: str | None = None) -> None:
        self.all_cols, self.sep, self.trailing, self.header = cols, sep, trailing, header
        self.pick = list(range(len(cols)))
        self.cols = list(cols)
        if fields:
            keys = [h.lower().replace(" ", "") for h, _, _ in cols]
            self.pick, self.cols = [], []
            for spec in (x.strip() for x in fields.split(",") if x.strip()):
                name, _, width = spec.partition("%")
                n = name.lower().replace(" ", "")
                found = [k for k in keys if k == n] or [k for k in keys if len(n) >= 2
                                                        and k.startswith(n)]
                if not found:
                    raise ReportError(f"Invalid field requested: \"{name}\"")
                at = keys.index(found[0])
                head, w, left = cols[at]
                if width:
                    try:
                        w = abs(int(width))
                    except ValueError:
                        raise ReportError(f"Invalid field requested: \"{spec}\"") from None
                self.pick.append(at)
                self.cols.append((head, w, left))
        self.rows: list[list[str]] = []

    def row(self, cells: list[str]) -> None:
        self.rows.append([cells[i] for i in self.pick])

    @property
    def lines(self) -> list[str]:
        out: list[str] = []
        sep, end = self.sep, (self.sep if self.trailing else "") or ""
        if self.header:
            if sep is not None:
                out.append(sep.join(h for h, _, _ in self.cols) + end)
            else:
                out.append(" ".join(h[:w].rjust(w) for h, w, _ in self.cols) + " ")
                out.append(" ".join("-" * w for _, w, _ in self.cols) + " ")
        for cells in self.rows:
            if sep is not None:
                out.append(sep.join(cells) + end)
            else:
                out.append(" ".join(c[:w].ljust(w) if left else c[:w].rjust(w)
                                    for c, (_, w, left) in zip(cells, self.cols, strict=True))
                           + " ")
        return out


def _banner(title: str, tres: list[str], fmt: str) -> list[str]:
    unit = TIME_FORMATS[fmt][0]
    what = "CPU" if tres == ["cpu"] else "TRES"
    usage = f"Usage reported in {unit}" if fmt == "percent" else f"Usage reported in {what} {unit}"
    return [BANNER, title, usage, BANNER]


def report(kind: str, params: dict[str, str], data: dict[str, Any], *, tres: list[str],
           tres_given: bool, fmt: str, sep: str | None, trailing: bool,
           header: bool) -> list[str]:
    start, end = float(data["start"]), float(data["end"])
    span = f"{stamp(start)} - {stamp(end - 1)}"
    secs = int(end - start)
    cluster = str(data["cluster"])
    tres_col = [("TRES Name", 14, True)] if tres_given else []
    out: list[str] = []
    if kind == "utilization":
        if header:
            out += _banner(f"Cluster Utilization {span}", tres, fmt)
        t = Table([("Cluster", 9, False), *tres_col, ("Allocated", 13, False),
                   ("Down", 10, False), ("PLND Down", 9, False), ("Idle", 13, False),
                   ("Reserved", 9, False), ("Reported", 13, False)], sep, trailing, header,
                  params.get("format"))
        for name in tres:
            # whole TRES-seconds, as Slurm's database keeps them, so that the parts add up
            # to Reported exactly (rounding each float apart could lose a second)
            rep = float(int(float(data["reported"].get(name, 0.0))))
            alloc = min(rep, float(round(float(data["allocated"].get(name, 0.0)))))
            down = min(rep - alloc, float(round(float(data["down"].get(name, 0.0)))))
            idle = max(0.0, rep - alloc - down)
            t.row([cluster, *([name] if tres_given else []),
                   *(value(x, rep, fmt) for x in (alloc, down, 0.0, idle, 0.0, rep))])
        return out + t.lines
    users = {x.strip() for x in params.get("users", "").split(",") if x.strip()} or None
    accounts = {x.strip() for x in params.get("accounts", "").split(",") if x.strip()} or None
    if kind == "accountutilizationbyuser":
        if header:
            out += _banner(f"Cluster/Account/User Utilization {span} ({secs} secs)", tres, fmt)
        t = Table([("Cluster", 9, False), ("Account", 15, True), ("Login", 9, False),
                   ("Proper Name", 15, False), *tres_col, ("Used", 10, False),
                   ("Energy", 10, False)], sep, trailing, header, params.get("format"))
        for name in tres:
            total = float(data["reported"].get(name, 0.0))
            for r in data["assocs"]:
                if accounts is not None and r["account"] not in accounts:
                    continue
                if r["user"] and users is not None and r["user"] not in users:
                    continue
                acct = r["account"] if sep is not None else " " * r["depth"] + r["account"]
                t.row([cluster, acct, r["user"], _proper_name(r["user"]) if r["user"] else "",
                       *([name] if tres_given else []),
                       value(float(r["used"].get(name, 0.0)), total, fmt), "0"])
        return out + t.lines
    # user topusage
    try:
        top = int(params.get("topcount", "10"))
    except ValueError:
        raise ReportError(f"Invalid TopCount {params.get('topcount')}") from None
    if header:
        out += _banner(f"Top {top} Users {span} ({secs} secs)", tres, fmt)
    t = Table([("Cluster", 9, False), ("Login", 9, False), ("Proper Name", 15, False),
               ("Account", 15, False), *tres_col, ("Used", 10, False), ("Energy", 10, False)],
              sep, trailing, header, params.get("format"))
    for name in tres:
        total = float(data["reported"].get(name, 0.0))
        rows = [u for u in data["users"]
                if (users is None or u["user"] in users)
                and (accounts is None or accounts & set(u["accounts"]))
                and float(u["used"].get(name, 0.0)) > 0]
        rows.sort(key=lambda u: (-float(u["used"].get(name, 0.0)), u["user"]))
        for u in rows[:top] if top > 0 else rows:
            t.row([cluster, u["user"], _proper_name(u["user"]), ",".join(u["accounts"]),
                   *([name] if tres_given else []),
                   value(float(u["used"].get(name, 0.0)), total, fmt), "0"])
    return out + t.lines


REPORTS = {("cluster", "utilization"): "utilization",
           ("cluster", "accountutilizationbyuser"): "accountutilizationbyuser",
           ("user", "topusage"): "topusage"}


def _match(word: str, names: list[str], least: int = 2) -> str | None:
    w = word.lower()
    found = [n for n in names if len(w) >= min(least, len(n)) and n.startswith(w)]
    return found[0] if len(found) == 1 else None


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _run, argv)


def _run(args: list[str]) -> int:
    try:
        # GNU getopt as sreport.c's getopt_long: options may follow the command too
        opts, rest = getopt.gnu_getopt(args, "hnpPt:T:VvQaM:",
                                   ["help", "noheader", "parsable", "parsable2", "tres=",
                                    "version", "usage", "verbose", "quiet", "all_clusters",
                                    "cluster=", "local", "federation"])
    except getopt.GetoptError as e:
        sys.stderr.write(f"{PROG}: {e.msg}\n{USAGE}")
        return 1
    header, sep, trailing, fmt = True, None, False, "minutes"
    tres, tres_given = ["cpu"], False
    try:
        for o, v in opts:
            if answer_info_option(o, USAGE, help_opts=("-h", "--help", "--usage"), usage_opts=()):
                return 0
            if o in ("-n", "--noheader"):
                header = False
            elif o in ("-P", "--parsable2"):
                sep, trailing = "|", False
            elif o in ("-p", "--parsable"):
                sep, trailing = "|", True
            elif o == "-t":
                fmt = time_format(v)
            elif o in ("-T", "--tres"):
                tres = [x.strip().lower() for x in v.split(",") if x.strip()]
                tres = ["gres/gpu" if x == "gpu" else x for x in tres]
                bad = [x for x in tres if x not in ("cpu", "mem", "node", "gres/gpu", "energy",
                                                    "billing")]
                if bad or not tres:
                    raise ReportError(f"Invalid TRES: {','.join(bad) or v}")
                tres_given = True
        if len(rest) < 2:
            sys.stderr.write(USAGE)
            return 1
        entity = _match(rest[0], ["cluster", "user", "job", "reservation"])
        if entity is None:
            raise ReportError(f"Invalid command: {rest[0]}")
        names = [r for (e, r) in REPORTS if e == entity]
        name = _match(rest[1], names, 3)
        if name is None:
            valid = {"cluster": '"AccountUtilizationByUser" and "Utilization"',
                     "user": '"TopUsage"'}.get(entity, "none in Corral")
            raise ReportError(f"Not valid report {rest[1]}\nValid {entity} reports are {valid}")
        params: dict[str, str] = {}
        for word in rest[2:]:
            key, eq, val = word.partition("=")
            k = key.lower()
            if not eq:
                if k in ("tree", "printjobcount"):
                    continue
                raise ReportError(f"Unknown condition: {word}\n"
                                  "Use keyword set to modify value")
            k = {"start": "start", "starttime": "start", "end": "end", "endtime": "end",
                 "users": "users", "user": "users", "accounts": "accounts",
                 "account": "accounts", "acct": "accounts", "topcount": "topcount",
                 "clusters": "clusters", "cluster": "clusters",
                 "format": "format"}.get(k, "")
            if not k:
                raise ReportError(f"Unknown condition: {word}\n"
                                  "Use keyword set to modify value")
            params[k] = val
        start, end = window(params, time.time())
        data = client.get("/v1/sreport", start=int(start), end=int(end))
        lines = report(REPORTS[(entity, name)], params, data, tres=tres,
                       tres_given=tres_given, fmt=fmt, sep=sep, trailing=trailing,
                       header=header)
    except ReportError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    sys.stdout.write("".join(x + "\n" for x in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
