"""The standard library's `getopt` without its `gettext` import (which pulls in `re`,
`enum` and `locale`: several milliseconds of every command's start).

Same functions, same `GetoptError` (`msg`, `opt`) and the same English messages, which
the commands turn into glibc's wording (fmt.getopt_long, scontrol._getopt_error).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["GetoptError", "error", "getopt", "gnu_getopt"]


class GetoptError(Exception):
    opt = ""
    msg = ""

    def __init__(self, msg: str, opt: str = "") -> None:
        self.msg = msg
        self.opt = opt
        Exception.__init__(self, msg, opt)

    def __str__(self) -> str:
        return self.msg


error = GetoptError


def _longopts(longopts: str | Iterable[str]) -> list[str]:
    return [longopts] if isinstance(longopts, str) else list(longopts)


def getopt(args: list[str], shortopts: str,
           longopts: str | Iterable[str] = ()) -> tuple[list[tuple[str, str]], list[str]]:
    """POSIX scanning: options stop at the first operand (as getopt.getopt)."""
    opts: list[tuple[str, str]] = []
    longs = _longopts(longopts)
    while args and args[0].startswith("-") and args[0] != "-":
        if args[0] == "--":
            args = args[1:]
            break
        if args[0].startswith("--"):
            opts, args = _do_longs(opts, args[0][2:], longs, args[1:])
        else:
            opts, args = _do_shorts(opts, args[0][1:], shortopts, args[1:])
    return opts, args


def gnu_getopt(args: list[str], shortopts: str,
               longopts: str | Iterable[str] = ()) -> tuple[list[tuple[str, str]], list[str]]:
    """GNU scanning: options and operands may be intermixed (as getopt.gnu_getopt),
    unless shortopts starts with '+' or POSIXLY_CORRECT is set."""
    opts: list[tuple[str, str]] = []
    prog_args: list[str] = []
    longs = _longopts(longopts)
    if shortopts.startswith("+"):
        shortopts = shortopts[1:]
        all_options_first = True
    else:
        all_options_first = bool(os.environ.get("POSIXLY_CORRECT"))
    while args:
        if args[0] == "--":
            prog_args += args[1:]
            break
        if args[0][:2] == "--":
            opts, args = _do_longs(opts, args[0][2:], longs, args[1:])
        elif args[0][:1] == "-" and args[0] != "-":
            opts, args = _do_shorts(opts, args[0][1:], shortopts, args[1:])
        elif all_options_first:
            prog_args += args
            break
        else:
            prog_args.append(args[0])
            args = args[1:]
    return opts, prog_args


def _do_longs(opts: list[tuple[str, str]], opt: str, longopts: list[str],
              args: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    optarg: str | None
    opt, eq, value = opt.partition("=")
    optarg = value if eq else None
    has_arg, opt = _long_has_args(opt, longopts)
    if has_arg:
        if optarg is None:
            if not args:
                raise GetoptError(f"option --{opt} requires argument", opt)
            optarg, args = args[0], args[1:]
    elif optarg is not None:
        raise GetoptError(f"option --{opt} must not have an argument", opt)
    opts.append(("--" + opt, optarg or ""))
    return opts, args


def _long_has_args(opt: str, longopts: list[str]) -> tuple[bool, str]:
    possibilities = [o for o in longopts if o.startswith(opt)]
    if not possibilities:
        raise GetoptError(f"option --{opt} not recognized", opt)
    if opt in possibilities:
        return False, opt
    if opt + "=" in possibilities:
        return True, opt
    if len(possibilities) > 1:
        raise GetoptError(f"option --{opt} not a unique prefix", opt)
    unique_match = possibilities[0]
    has_arg = unique_match.endswith("=")
    return has_arg, unique_match[:-1] if has_arg else unique_match


def _do_shorts(opts: list[tuple[str, str]], optstring: str, shortopts: str,
               args: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    while optstring != "":
        opt, optstring = optstring[0], optstring[1:]
        if _short_has_arg(opt, shortopts):
            if optstring == "":
                if not args:
                    raise GetoptError(f"option -{opt} requires argument", opt)
                optstring, args = args[0], args[1:]
            optarg, optstring = optstring, ""
        else:
            optarg = ""
        opts.append(("-" + opt, optarg))
    return opts, args


def _short_has_arg(opt: str, shortopts: str) -> bool:
    for i in range(len(shortopts)):
        if opt == shortopts[i] != ":":
            return shortopts.startswith(":", i + 1)
    raise GetoptError(f"option -{opt} not recognized", opt)
