"""scrontab: manage a user's recurring batch jobs, as Slurm 22.05's scrontab(1).

    scrontab [-u user] file          install `file` (or - for standard input)
    scrontab [-u user] [-e | -l | -r | -v]

The file is read here (model/crontab.py): each cron line with the `#SCRON` lines before it
becomes one job submission, its options parsed as sbatch parses them (cli/sbatch.py);
the controller installs them all or none (controller/crontab.py).  Messages and exit
statuses are Slurm's (src/scrontab/scrontab.c).
"""

from __future__ import annotations

import os
import pwd
import sys

from corral.cli import client
from corral.cli.options import CliExit, GetoptError, directive_arguments

TYPE_CHECKING = False  # `typing` would cost every start
if TYPE_CHECKING:
    from corral.model.crontab import CrontabItem

PROG = "scrontab"

USAGE = """\
usage:\tscrontab [-u user] file
\tscrontab [-u user] [ -e | -l | -r | -v]
\t-e\tEdit user's crontab (default action if stdin is a TTY)
\t-l\tList user's crontab
\t-r\tDelete user's crontab
\t-u\tUser to edit crontab for
"""

DEFAULT_CRONTAB = """\
# Welcome to scrontab, Slurm's cron-like interface.
#
# Edit this file to submit recurring jobs to be run by Slurm.
#
# Note that jobs will be run based on the Slurm controller's
# time and timezone.
#
# Lines must either be valid entries, comments (start with '#'),
# or blank.
#
# Lines starting with #SCRON will be parsed for options to use
# with the next cron line. E.g., "#SCRON --time 1" would request
# a one minute timelimit be applied. See the sbatch man page for
# options, although note that not all options are supported here.
#
# For example, the following line (when uncommented) would request
# a job be run at 5am each day.
# 0 5 * * * /my/script/to/run
#
# min hour day-of-month month day-of-week command
"""

SCRIPT_HEADER = "#!/bin/sh\n# This job was submitted through scrontab\n"


class _Fatal(Exception):
    pass


def _fatal(message: str) -> _Fatal:
    sys.stderr.write(f"{PROG}: fatal: {message}\n")
    return _Fatal()


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _run, argv)


def _parse_args(args: list[str]) -> tuple[str, str | None, str | None]:
    """(action, user, file): action is edit, list, remove or install."""
    edit = list_only = remove = False
    user: str | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--" or not a.startswith("-") or a == "-":
            if a == "--":
                i += 1
            break
        for j, c in enumerate(a[1:], 1):
            if c == "e":
                if not os.isatty(0):
                    raise _fatal("Standard input is not a TTY")
                edit = True
            elif c == "l":
                list_only = True
            elif c == "r":
                remove = True
            elif c == "v":
                pass
            elif c == "u":
                rest = a[j + 1:]
                if not rest:
                    i += 1
                    if i >= len(args):
                        sys.stderr.write(USAGE)
                        raise _Fatal()
                    rest = args[i]
                user = rest
                break
            else:
                sys.stderr.write(USAGE)
                raise _Fatal()
        i += 1
    operands = args[i:]
    if edit or list_only or remove:
        if operands:
            sys.stderr.write(USAGE)
            raise _Fatal()
        # Slurm's order of precedence: remove, then list, then edit
        return ("remove" if remove else "list" if list_only else "edit"), user, None
    if len(operands) > 1:
        sys.stderr.write(USAGE)
        raise _Fatal()
    if operands:
        return "install", user, operands[0]
    if os.isatty(0):
        return "edit", user, None
    return "install", user, "-"


def _run(args: list[str]) -> int:
    try:
        return _act(args)
    except _Fatal:
        return 1


def _act(args: list[str]) -> int:
    action, user, path = _parse_args(args)
    if user is not None:
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise _fatal(f"Could not find user {user}") from None
    else:
        pw = pwd.getpwuid(os.getuid())
    # slurm.conf's ScronParameters=enable, asked of the controller (it holds the crontabs)
    current: dict[str, object] = {}
    try:
        current = client.get("/v1/crontab", user=user)
    except client.ApiError as e:
        if e.payload.get("disabled"):
            raise _fatal("scrontab is disabled on this cluster") from None
        if action in ("list", "edit"):
            raise _fatal(f"slurm_request_crontab failed: {e.message}") from None
        if action == "remove":
            raise _fatal(f"slurm_remove_crontab failed: {e.message}") from None
        # installing a file reads nothing: the update's answer says what is wrong
    if action == "remove":
        try:
            client.request("DELETE", "/v1/crontab" + (f"?user={client.quote(user)}"
                                                      if user is not None else ""))
        except client.ApiError as e:
            raise _fatal(f"slurm_remove_crontab failed: {e.message}") from None
        return 0
    text: str | None
    if action == "install":
        text = _read_input(path or "-")
    else:
        text = _str_or_none(current.get("crontab"))
        disabled = str(current.get("disabled_lines") or "")
        if text is not None and disabled:
            from corral.model.crontab import line_set, mark_lines

            text = mark_lines(text, line_set(disabled), "#DISABLED: ")
    if action == "list":
        if text is None:
            sys.stdout.write(f"no crontab for {pw.pw_name}\n")
            return 1
        sys.stdout.write(text)
        return 0
    return _edit_and_update(text, action == "edit", user, pw)


def _str_or_none(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "surrogateescape")
    except OSError:
        raise _fatal(f"failed to open {path}") from None


def _edit(text: str | None) -> str:
    """Slurm's _edit_crontab: the text in a private temp file, $VISUAL, $EDITOR or vi."""
    import subprocess
    import tempfile

    if text is None:
        text = DEFAULT_CRONTAB
    os.umask(0o077)
    fd, name = tempfile.mkstemp(prefix="scrontab-", dir=os.environ.get("TMPDIR") or "/tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        try:
            rc = subprocess.call([editor, name])
        except OSError:
            rc = 127
        if rc != 0:
            raise _fatal("editor returned non-zero exit code")
        with open(name, "rb") as f:
            return f.read().decode("utf-8", "surrogateescape")
    finally:
        try:
            os.unlink(name)
        except OSError:
            pass


def _ask_retry(prompt: str) -> bool:
    """Slurm's y/n loop: the prompt again for every other character read."""
    while True:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        c = sys.stdin.read(1)
        if c == "":
            return False
        if c.lower() in ("y", "n"):
            return c.lower() == "y"


def _edit_and_update(text: str | None, edit: bool, user: str | None,
                     pw: pwd.struct_passwd) -> int:
    from corral.model.crontab import CrontabLineError, line_set, mark_lines, parse_crontab

    while True:
        if edit:
            text = _edit(text)
        assert text is not None
        try:
            items = parse_crontab(text)
            jobs = [_entry_job(item, pw) for item in items]
        except (CrontabLineError, _BadOptions) as e:
            for msg in e.messages:
                sys.stderr.write(msg if msg.startswith(PROG + ":") else
                                 f"{PROG}: error: {msg}\n")
            lineno = e.lineno
            if not edit:
                sys.stdout.write("There are errors in your crontab.\n")
                return 1
            if not _ask_retry("There are errors in your crontab.\n"
                              "The failed line(s) is commented out with #BAD:\n"
                              "Do you want to retry the edit? (y/n) "):
                return 0
            text = mark_lines(text, {lineno}, "#BAD: ")
            continue
        body = {"crontab": text, "jobs": jobs}
        if user is not None:
            body["user"] = user
        try:
            client.request("PUT", "/v1/crontab", body)
            return 0
        except client.ApiError as e:
            lines = str(e.payload.get("failed_lines") or "(null)")
            report = (f"There was an issue with the job submission on lines {lines}\n"
                      f"The error code return was: {e.message}\n"
                      f"The error message was: {e.payload.get('user_msg') or '(null)'}\n")
            if not edit:
                sys.stdout.write(report)
                return 1
            if not _ask_retry(report + "The failed lines are commented out with #BAD:\n"
                              "Do you want to retry the edit? (y/n) "):
                return 0
            text = mark_lines(text, line_set(lines), "#BAD: ")


class _BadOptions(Exception):
    def __init__(self, lineno: int, messages: list[str]) -> None:
        super().__init__(*messages)
        self.lineno = lineno
        self.messages = messages


def _entry_job(item: CrontabItem, pw: pwd.struct_passwd) -> dict[str, object]:
    """One entry as a job submission: its #SCRON options parsed as sbatch's, the command
    as the script (Slurm's _entry_to_job)."""
    import time

    from corral.cli.sbatch import build_payload, parse_sbatch

    words: list[str] = []
    for n, opt in enumerate(item.options):
        try:
            words.extend(directive_arguments(opt, "crontab", item.line_start + n, PROG))
        except (CliExit, GetoptError) as e:
            raise _BadOptions(item.line_start + n, _messages(e)) from None
    entry = item.entry
    script = (SCRIPT_HEADER + "".join(line + "\n" for line in item.scron_lines)
              + f"# crontab time request was: '{entry.written}'\n{entry.command}\n")
    env = {"SLURM_GET_USER_ENV": "1", "HOME": pw.pw_dir, "USER": pw.pw_name,
           "LOGNAME": pw.pw_name, "SHELL": pw.pw_shell or "/bin/sh",
           "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")}
    named = any(w == "-J" or w.startswith(("--job-name", "-J", "--job-n", "--job-na"))
                for w in words)
    try:
        sub = parse_sbatch(words, env, script, pw.pw_dir, time.time(), submit_host=_host())
    except CliExit as e:
        raise _BadOptions(item.line_end, _messages(e)) from None
    payload = build_payload(sub)
    payload["spec"]["command"] = entry.command  # Slurm's argv[0]: scontrol's Command=
    if not named:
        payload["spec"]["name"] = entry.command.split(" ")[0]
    return {"line_start": item.line_start, "line_end": item.line_end,
            "cron": item.cron_text, "payload": payload}


def _messages(e: Exception) -> list[str]:
    text = getattr(e, "stderr", "") or str(e)
    out = []
    for line in text.splitlines():
        if line.startswith("sbatch:"):
            line = PROG + line[len("sbatch"):]
        out.append(line + "\n")
    return out or [f"{PROG}: error: invalid option in #SCRON line\n"]


def _host() -> str:
    return os.uname().nodename.split(".")[0]
