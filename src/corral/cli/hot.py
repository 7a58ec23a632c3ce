"""The hot commands' common forms, answered with one request and one write (issue #19).

`squeue`, `sinfo`, `scontrol show job|node ID`, `sacct -j JOBID` and `scancel JOBID`, as users and scripts
type them most, cost here little more than Python's own start: this module imports
nothing beyond the interpreter's built-ins and `_socket`, where the full command modules
import ~20 modules (os alone ~2 ms).  The controller prints the text itself, with the
commands' own code (controller/answers.py, controller/api_text.py); this only sends the
request the full command would send for that text and writes what comes back.

`run` returns None whenever it cannot answer exactly as the full command would: other
options, an environment that changes the output (TZ, SLURM_TIME_FORMAT, the command's
own variables), no controller socket of this cluster, an answer other than the text.
The launcher (launchers/corral-launch) then runs the full command, which asks again.
Only a request that changes nothing (a GET) may be asked twice so: scancel's POST falls
back only when nothing was sent (no connection).  sbatch's common forms are
cli/sbatch_hot.py's, imported only for sbatch.
"""

import posix

# The request a plain `squeue` makes for its printed text (squeue._main with no
# arguments; tests/unit/test_cli_hot.py checks that they stay the same).
SQUEUE_PATH = ("/v1/jobs?fields=array_job_id,array_max_running,array_task_id,array_tasks,"
               "display_id,end_time,job_id,name,node_cnt_wag,nodes,num_nodes,partition,"
               "priority,reason,sched_nodes,start_time,state,suspend_time,suspended_secs,user"
               "&states=COMPLETING,PENDING,REQUEUED,RUNNING,SUSPENDED&rows=1&render=squeue")
# What scancel sends to cancel a job (Options.request_body() without options).
CANCEL_BODY = b'{"signal":9,"batch_only":false,"full":false,"cancel":true}'
# Variables that change what a command prints or asks (time zone and format, clusters,
# option parsing); and each command's own, by prefix.
_ENV_ANY = (b"TZ", b"SLURM_TIME_FORMAT", b"SLURM_CLUSTERS", b"SLURM_CONF", b"POSIXLY_CORRECT")
_ENV_PREFIX = {"squeue": b"SQUEUE_", "sinfo": b"SINFO_", "scontrol": b"SCONTROL_",
               "scancel": b"SCANCEL_", "sacct": b"SACCT_"}
# What an id may hold to go into a path as it is (RFC 3986 unreserved: quote() keeps it).
_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")
_SHOW = {"job": "job", "jobs": "job", "node": "node", "nodes": "node"}


def _has_cluster(home: bytes) -> bool:
    return _exists(home + b"/corral.sock") or _exists(home + b"/agent.sock")


def _exists(path: bytes) -> bool:
    try:
        posix.stat(path)
    except OSError:
        return False
    return True


def _home() -> bytes | None:
    """paths.corral_home(), where it needs no path arithmetic; None elsewhere."""
    env = posix.environ
    home = env.get(b"CORRAL_HOME")
    if home:
        return home if home[:1] == b"/" and b"/." not in home and b"//" not in home \
            and not home.endswith(b"/") else None
    system = env.get(b"CORRAL_SYSTEM_HOME") or b"/var/lib/corral"
    if system[:1] != b"/" or b"/." in system or system.endswith(b"/"):
        return None
    if posix.geteuid() == 0:
        return system
    user_home = env.get(b"HOME")
    if not user_home or user_home[:1] != b"/":
        return None  # expanduser would ask the password database
    own = user_home.rstrip(b"/") + b"/.corral"
    if _has_cluster(own):
        return own
    return system if _has_cluster(system) else own


def exchange(method: str, path: str, body: bytes = b"") -> bytes | None:
    """The controller's whole answer to one request (header and content), or None when no
    connection was made (nothing was sent).  A connection lost after sending raises
    OSError."""
    home = _home()
    if home is None:
        return None
    import _socket

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(60.0)
        try:
            s.connect(home + b"/corral.sock")
        except OSError:
            return None
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: corral\r\nConnection: close\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  .encode() + body)
        chunks = []
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        s.close()
    return b"".join(chunks)


def _ask(method: str, path: str, body: bytes = b"") -> tuple[int, bytes, bytes] | None:
    """(status, lowered header, content), or None when no connection was made (nothing
    was sent).  A connection lost after sending raises OSError."""
    raw = exchange(method, path, body)
    if raw is None:
        return None
    header, _, content = raw.partition(b"\r\n\r\n")
    try:
        status = int(header.split(b"\r\n", 1)[0].split()[1])
    except (IndexError, ValueError):
        status = 0
    return status, header.lower(), content


def _text(path: str) -> bytes | None:
    """The text a GET answers, or None (anything else: the full command asks again)."""
    try:
        answer = _ask("GET", path)
    except OSError:
        return None
    if answer is None:
        return None
    status, header, content = answer
    if status != 200 or b"\r\ncontent-type: text/plain" not in header \
            or b"transfer-encoding" in header:
        return None
    # the commands encode what they print as this process's locale says: leave any
    # character beyond ASCII to them
    return content if content.isascii() else None


def _write(data: bytes) -> int:
    """All of `data` to stdout; a closed pipe (`squeue | head`) is not an error."""
    view = memoryview(data)
    try:
        while view:
            view = view[posix.write(1, view):]
    except BrokenPipeError:
        pass
    return 0


def _plain_env(command: str) -> bool:
    env = posix.environ
    prefix = _ENV_PREFIX[command]
    return not any(k in env for k in _ENV_ANY) and not any(k.startswith(prefix) for k in env)


def _scancel(job_id: str) -> int | None:
    try:
        answer = _ask("POST", f"/v1/jobs/{job_id}/signal", CANCEL_BODY)
    except (ConnectionResetError, BrokenPipeError):
        answer = (0, b"", b"")  # lost after sending: as client.request, no answer
    except OSError as e:  # as client.run_cli reports what the request raised
        posix.write(2, f"scancel: error: internal error: {type(e).__name__}: {e}\n".encode())
        return 1
    if answer is None:
        return None  # nothing sent: scancel itself connects (and waits for a restart)
    status, _, content = answer
    if 200 <= status < 400 or status == 404:  # 404: no such job, which scancel keeps quiet
        return 0
    from corral.cli.client import json_loads

    message = "malformed answer from the controller"
    if status:
        try:
            decoded = json_loads(content) if content else None
        except ValueError as e:  # client.request raises it, client.run_cli reports it
            posix.write(2, f"scancel: error: internal error: ValueError: {e}\n".encode())
            return 1
        message = decoded.get("error", f"HTTP {status}") if isinstance(decoded, dict) \
            else f"HTTP {status}"
    else:
        status = 502
    from corral.cli.scancel import _QUIET_ERRORS

    if message in _QUIET_ERRORS:
        return 0
    posix.write(2, f"scancel: error: Kill job error on job id {job_id}: {message}\n".encode())
    return 1


def run(command: str, args: list[str]) -> int | None:
    """The exit code, having answered `command args`; None: the full command must."""
    if command == "sbatch":
        try:
            # its common forms: the request sbatch would send, built without its modules
            from corral.cli import sbatch_hot

            return sbatch_hot.run(args)
        except KeyboardInterrupt:
            return 130
    if command not in _ENV_PREFIX or not _plain_env(command):
        return None
    try:
        if command == "squeue" and not args:
            text = _text(SQUEUE_PATH)
        elif command == "sinfo" and not args:
            text = _text("/v1/text/sinfo")
        elif command == "scontrol" and len(args) == 3 and args[0] == "show" \
                and args[1] in _SHOW and _plain(args[2]):
            text = _text(f"/v1/text/scontrol?show={_SHOW[args[1]]}&id={args[2]}")
        elif command == "sacct" and len(args) == 2 and args[0] == "-j" and _job_id(args[1]):
            text = _text(f"/v1/text/sacct?id={args[1]}")
        elif command == "scancel" and len(args) == 1 and _job_id(args[0]):
            return _scancel(args[0])
        else:
            return None
        return None if text is None else _write(text)
    except KeyboardInterrupt:
        return 130


def _job_id(text: str) -> bool:
    """A plain job number, as the commands print it (no sign, no leading zero)."""
    return text.isdigit() and text.isascii() and text[0] != "0"


def _plain(ident: str) -> bool:
    return ident.isascii() and bool(ident) and all(b in _PLAIN for b in ident.encode())
