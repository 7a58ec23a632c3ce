"""sbatch's common forms, submitted with nothing but the interpreter's built-ins (issue #19).

What tools type — `sbatch SCRIPT` with #SBATCH lines, `sbatch --wrap CMD`, with
--parsable, -H and the common options (-J -o -e -p -t -N -n -c --ntasks-per-node --mem
--mem-per-cpu --gres --gpus* -A -q --array --dependency --export --comment --[no-]requeue
--open-mode) — costs the full command ~20 modules (os, cli/options.py's
option table and value parsers, model/): most of a submission's time over Python's own
start (bench/bench_commands.py).  Here the same request body is built from those forms
with `posix` and `_socket` only.

`submission` returns None for anything it is not sure of: another option, an
abbreviated one, a value in a form it does not read itself (it reads the plain forms, and
leaves every form that could be an error to sbatch), a #SBATCH line with quotes or
escapes, an sbatch variable in the environment (SBATCH_*, SLURM_CLUSTERS, SLURM_HINT,
PYXIS_*), a script from stdin, anything that would make sbatch print a message first.
The launcher then runs the full sbatch (cli/sbatch.py), which alone prints every error.
tests/unit/test_sbatch_hot.py holds the two to the same request body for each form, and
tests/e2e/test_hot_commands.py submits through both.

Only what comes back after sending is handled here: the job id, or the controller's
refusal in sbatch's words (cli/sbatch.py `_run`).
"""

import posix
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROG = "sbatch"
WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"  # as sbatch's

# The options read here: long name → key (sbatch's option key), whether it takes a value.
_LONG: dict[str, tuple[str, bool]] = {
    "job-name": ("job-name", True), "output": ("output", True), "error": ("error", True),
    "partition": ("partition", True), "time": ("time", True), "nodes": ("nodes", True),
    "ntasks": ("ntasks", True), "cpus-per-task": ("cpus-per-task", True),
    "mem": ("mem", True), "gres": ("gres", True), "gpus": ("gpus", True),
    "gpus-per-node": ("gpus-per-node", True), "gpus-per-task": ("gpus-per-task", True),
    "account": ("account", True), "qos": ("qos", True), "array": ("array", True),
    "dependency": ("dependency", True), "export": ("export", True),
    "hold": ("hold", False), "parsable": ("parsable", False), "wrap": ("wrap", True),
    "ntasks-per-node": ("ntasks-per-node", True), "mem-per-cpu": ("mem-per-cpu", True),
    "comment": ("comment", True), "requeue": ("requeue", False),
    "no-requeue": ("no-requeue", False), "open-mode": ("open-mode", True),
}
_SHORT: dict[str, str] = {
    "J": "job-name", "o": "output", "e": "error", "p": "partition", "t": "time",
    "N": "nodes", "n": "ntasks", "c": "cpus-per-task", "G": "gpus", "A": "account",
    "q": "qos", "a": "array", "d": "dependency", "H": "hold",
}
_FLAGS = frozenset({"hold", "parsable", "requeue", "no-requeue"})
# Variables sbatch reads beyond SBATCH_*: its SBATCH_ENV_VARS, and Pyxis' by prefix.
_ENV_OTHER = ("SLURM_CLUSTERS", "SLURM_HINT")
_INT_MAX = 2**31 - 1
_ARRAY_LIMIT = 4_000_001  # model/arrays.py MAX_ARRAY_SIZE_LIMIT
_NAME_MAX = 1024  # Slurm's shortest string limit (model/jobspec.py): longer is left to sbatch
_SUBMIT_LINE_MAX = 1024 * 1024
_UNIT_MB = {"": 1, "K": 0, "M": 1, "G": 1024, "T": 1024 * 1024}
_TYPE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


class _Decline(Exception):
    """Not a form this module reads: the full sbatch does it all."""


def _digits(text: str) -> int:
    """A plain ASCII number (no sign, space or unit), else _Decline."""
    if not (text.isascii() and text.isdigit()):
        raise _Decline
    return int(text)


def _positive(text: str) -> int:
    """options.parse_int(..., positive=True) for its plain forms."""
    n = _digits(text)
    if not 0 < n <= _INT_MAX:
        raise _Decline
    return n


def _time_limit(text: str) -> int:
    """options.parse_time_limit (model/timefmt.py) for plain ASCII digits: minutes,
    MM:SS, HH:MM:SS, D-HH[:MM[:SS]], UNLIMITED; seconds rounded up to minutes, 0 → -1."""
    t = text.strip()
    if t.upper() in ("INFINITE", "UNLIMITED", "-1"):
        return -1
    days, dash, rest = t.partition("-")
    if not dash:
        days, rest = "", t
    parts = [_digits(p) for p in rest.split(":")]
    if len(parts) > 3:
        raise _Decline
    if dash:
        secs = _digits(days) * 86400 + parts[0] * 3600
        secs += parts[1] * 60 if len(parts) > 1 else 0
        secs += parts[2] if len(parts) > 2 else 0
    elif len(parts) == 3:
        secs = parts[0] * 3600 + parts[1] * 60 + parts[2]
    elif len(parts) == 2:
        secs = parts[0] * 60 + parts[1]
    else:
        secs = parts[0] * 60
    secs = (secs + 59) // 60 * 60
    return -1 if secs == 0 else secs


def _mbytes(text: str) -> int:
    """model/units.py str_to_mbytes for ASCII digits and one unit letter (and B)."""
    end = len(text)
    while end and not text[end - 1].isdigit():
        end -= 1
    value, rest = _digits(text[:end]), text[end:]
    if rest[1:] not in ("", "B", "b") or rest[:1].upper() not in _UNIT_MB:
        raise _Decline
    unit = rest[:1].upper()
    return (value + 1023) // 1024 if unit == "K" else value * _UNIT_MB[unit]


def _gpu_type(text: str) -> str:
    """A GPU type that can be nothing else (a count is digits; options._gres_count)."""
    if not text or not text[0].isalpha() or not set(text) <= _TYPE_CHARS:
        raise _Decline
    return text


def _gres(text: str) -> tuple[int, str | None]:
    """options.parse_gres for one plain item: gpu, gpu:N, gpu:TYPE, gpu:TYPE:N."""
    parts = text.split(":")
    if parts[0] != "gpu" or len(parts) > 3 or text != text.strip():
        raise _Decline
    if len(parts) == 1:
        return 1, None
    if len(parts) == 2:
        if parts[1].isascii() and parts[1].isdigit():
            return int(parts[1]), None
        return 1, _gpu_type(parts[1])
    return _digits(parts[2]), _gpu_type(parts[1])


def _gpus(text: str) -> tuple[int, str | None]:
    """options.parse_gpu_request for N, TYPE:N, gpu:TYPE:N."""
    parts = text.split(":")
    if text != text.strip():
        raise _Decline
    if parts[0] == "gpu" and len(parts) > 1:
        parts = parts[1:]
    if len(parts) == 1:
        return _digits(parts[0]), None
    if len(parts) == 2:
        return _digits(parts[1]), _gpu_type(parts[0])
    raise _Decline


def _check_array(text: str) -> None:
    """model/arrays.py parse_array_ranges's checks, for specs without spaces."""
    spec, pct, throttle = text.partition("%")
    if pct:
        _digits(throttle)
    if not spec:
        raise _Decline
    for part in spec.split(","):
        span, colon, step = part.partition(":")
        lo_text, dash, hi_text = span.partition("-")
        if colon and not dash:
            raise _Decline
        lo = _digits(lo_text)
        hi = _digits(hi_text) if dash else lo
        if hi < lo or (colon and _digits(step) < 1) or hi >= _ARRAY_LIMIT:
            raise _Decline


def _value(key: str, arg: str | None) -> "Any":
    """The value sbatch's _set_option stores for `key`, for the forms read here."""
    if arg is None:
        return True  # --hold, --parsable
    if key == "time":
        return _time_limit(arg)
    if key == "nodes":
        n = _digits(arg)
        if n == 0:
            raise _Decline
        return (n, n)
    if key in ("ntasks", "cpus-per-task", "ntasks-per-node"):
        return _positive(arg)
    if key in ("mem", "mem-per-cpu"):
        return _mbytes(arg)
    if key == "open-mode":
        if arg[:1] in ("a", "A"):
            return "append"
        if arg[:1] in ("t", "T"):
            return "truncate"
        raise _Decline
    if key in ("output", "error"):
        return "/dev/null" if arg.lower() == "none" else arg
    if len(arg.encode("utf-8", "surrogateescape")) > _NAME_MAX:
        raise _Decline  # sbatch checks Slurm's limits (options.too_long_field)
    if key == "gres":
        _gres(arg)
    elif key in ("gpus", "gpus-per-node", "gpus-per-task"):
        _gpus(arg)
    elif key == "array":
        _check_array(arg)
    elif key == "export":
        if '"' in arg or "'" in arg:
            raise _Decline  # options.split_quoted's quoting
    elif key == "partition" and arg == "":
        raise _Decline
    return arg


def _parse(args: list[str]) -> tuple[list[tuple[str, str | None]], int]:
    """OptionTable.parse (getopt_long, "+" mode) for the options read here, exactly
    named: the (key, argument) pairs and the index of the first operand."""
    found: list[tuple[str, str | None]] = []
    i, n = 0, len(args)
    while i < n:
        arg = args[i]
        if arg[:1] != "-" or arg == "-":
            return found, i
        if arg[:2] == "--":
            name, eq, value = arg[2:].partition("=")
            known = _LONG.get(name)
            if known is None:
                raise _Decline  # "--", another option, an abbreviation
            key, takes = known
            if eq:
                if not takes:
                    raise _Decline
                found.append((key, value))
                i += 1
            elif takes:
                if i + 1 >= n:
                    raise _Decline
                found.append((key, args[i + 1]))
                i += 2
            else:
                found.append((key, None))
                i += 1
            continue
        pos = 1
        i += 1
        while pos < len(arg):
            key = _SHORT.get(arg[pos], "")
            if not key:
                raise _Decline
            if key in _FLAGS:
                found.append((key, None))
                pos += 1
                continue
            if arg[pos + 1:]:
                found.append((key, arg[pos + 1:]))
            elif i < n:
                found.append((key, args[i]))
                i += 1
            else:
                raise _Decline
            break
    return found, n


def _directive_words(text: str) -> list[str]:
    """options.directive_arguments for lines without quotes or escapes: words split on
    whitespace, up to a # (a comment)."""
    if '"' in text or "'" in text or "\\" in text:
        raise _Decline
    words: list[str] = []
    for word in text.split():
        if word[0] == ":":
            raise _Decline
        head, hash_, _ = word.partition("#")
        if head:
            words.append(head)
        if hash_:
            break
    return words


def _script_options(script: str) -> list[tuple[str, str | None]]:
    """The options of the script's #SBATCH lines (sbatch's _batch_directives)."""
    args: list[str] = []
    for line in script.split("\n"):
        if line.startswith("#S"):
            if line.startswith("#SBATCH"):
                words = _directive_words(line[7:])
                if words[:1] and words[0].lower() in ("hetjob", "packjob"):
                    raise _Decline
                args.extend(words)
            elif line.startswith("#SLURM"):
                raise _Decline  # sbatch warns about those first
            continue
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#"):
            break
    if not args:
        return []
    found, index = _parse(args)
    if index < len(args) or any(key == "wrap" for key, _ in found):
        raise _Decline  # an operand: sbatch's "Invalid directive"; --wrap: ignored there
    return found


def _full_path(path: str, base: str) -> str:
    """options.full_path."""
    if path.startswith("/"):
        return path
    return f"{base.rstrip('/')}/{path}" if base != "/" else f"/{path}"


def _script_file(name: str, cwd: str) -> str:
    """options.search_path's answer where it is an absolute path or a script in the
    current directory (one found on $PATH is left to sbatch)."""
    if name.startswith("/"):
        path = name
    else:
        parts = [p for p in name.split("/") if p and p != "."]
        if not parts or ".." in parts or name == ":" \
                or (not name.startswith(".") and parts != name.split("/")):
            raise _Decline  # sbatch's normpath, its hetjob ":"
        path = _full_path("/".join(parts), cwd)
    try:
        if not posix.access(path, posix.R_OK) or posix.stat(path).st_mode & 0o170000 == 0o040000:
            raise _Decline
    except (OSError, ValueError):
        raise _Decline from None
    return path


def _read_script(path: str) -> str:
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        raise _Decline from None
    try:
        chunks = []
        while chunk := posix.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError:
        raise _Decline from None
    finally:
        posix.close(fd)
    script = b"".join(chunks).decode("utf-8", "surrogateescape")
    # sbatch's _check_script: anything it refuses is left to it
    if not script.startswith("#!") or not script.strip() or "\0" in script \
            or "\r\n" in script:
        raise _Decline
    return script


def _job_environment(export: str, env: dict[str, str], v: "dict[str, Any]", cwd: str,
                     submit_host: str, umask: int, prio: int) -> dict[str, str]:
    """sbatch._job_environment without --export-file (options.export_environment,
    options.gpu_option_environment)."""
    tokens = export.split(",")
    upper = [t.upper() for t in tokens]
    if "ALL" in upper:
        job_env = dict(env)
    else:
        job_env = {k: val for k, val in env.items() if k.startswith("SLURM_")}
    for tok, up in zip(tokens, upper, strict=True):
        if up in ("ALL", "NONE") or not tok:
            continue
        name, eq, value = tok.partition("=")
        if eq:
            job_env[name] = value
        elif name in env:
            job_env[name] = env[name]
    for key, var in (("gpus", "SLURM_GPUS"), ("gpus-per-node", "SLURM_GPUS_PER_NODE"),
                     ("gpus-per-task", "SLURM_GPUS_PER_TASK")):
        if v.get(key):
            job_env[var] = v[key]
    job_env["SLURM_PRIO_PROCESS"] = str(prio)
    job_env["SLURM_SUBMIT_DIR"] = cwd
    job_env["SLURM_SUBMIT_HOST"] = submit_host
    job_env["SLURM_UMASK"] = f"0{umask >> 6 & 7}{umask >> 3 & 7}{umask & 7}"
    return job_env


def submission(argv: list[str], env: dict[str, str], cwd: str, *, submit_host: str,
               umask: int, prio: int) -> "tuple[dict[str, Any], bool] | None":
    """(the POST /v1/jobs body, --parsable) that sbatch.build_payload(parse_sbatch(...))
    gives for these arguments, or None when this is not a form read here."""
    try:
        return _submission(argv, env, cwd, submit_host, umask, prio)
    except _Decline:
        return None


def _submission(argv: list[str], env: dict[str, str], cwd: str, submit_host: str,
                umask: int, prio: int) -> "tuple[dict[str, Any], bool]":
    if any(k.startswith(("SBATCH_", "PYXIS_")) or k in _ENV_OTHER for k in env):
        raise _Decline
    given, index = _parse(argv)
    operands = argv[index:]
    wrap = None
    for key, arg in given:
        if key == "wrap":
            wrap = arg
    script_path: str | None = None
    if wrap is not None:
        if operands:
            raise _Decline
        script = f"{WRAP_HEADER}{wrap}\n"
    elif operands:
        script_path = _script_file(operands[0], cwd)
        script = _read_script(script_path)
    else:
        raise _Decline  # the script on stdin
    v: dict[str, Any] = {}
    for key, arg in [*_script_options(script), *given]:
        if key == "no-requeue":
            v["requeue"] = False
        elif key == "requeue":
            v["requeue"] = True
        elif key != "wrap":
            v[key] = _value(key, arg)
    if "mem" in v and "mem-per-cpu" in v:
        raise _Decline  # sbatch's "mutually exclusive"

    work_dir = cwd
    array = v.get("array")
    stdout = v.get("output")
    if stdout is None:
        stdout = "slurm-%A_%a.out" if array else "slurm-%j.out"
    stdout = _full_path(stdout, work_dir)
    stderr = _full_path(v["error"], work_dir) if "error" in v else None

    # node and task counts (sbatch._finish without -w, --ntasks-per-node)
    nodes_set = "nodes" in v
    min_nodes, max_nodes = v.get("nodes", (1, 0))
    ntasks_set = "ntasks" in v
    ntasks = v.get("ntasks", 1)
    per_node = v.get("ntasks-per-node")
    if per_node and not ntasks_set and (max_nodes == 0 or min_nodes == max_nodes):
        ntasks, ntasks_set = min_nodes * per_node, True
    if nodes_set and (min_nodes == max_nodes or max_nodes == 0) and not ntasks_set:
        ntasks = max(min_nodes, 1)
    elif nodes_set and ntasks_set:
        if max_nodes and ntasks < max_nodes:
            max_nodes = ntasks
        if ntasks < min_nodes:
            raise _Decline  # sbatch warns first

    # options.gpu_request
    gpus = gpus_per_node = gpus_per_task = 0
    gpu_type: str | None = None
    if "gres" in v:
        gpus_per_node, gpu_type = _gres(v["gres"])
    for key in ("gpus", "gpus-per-node", "gpus-per-task"):
        if key in v:
            count, kind = _gpus(v[key])
            if key == "gpus":
                gpus = count
            elif key == "gpus-per-node":
                gpus_per_node = count
            else:
                gpus_per_task = count
            gpu_type = kind or gpu_type

    if "job-name" in v:
        name = v["job-name"]
    elif script_path is not None:
        name = script_path.rpartition("/")[2]
    else:
        name = "wrap"
    submit_line = " ".join([PROG, *argv])
    if len(submit_line.encode("utf-8", "surrogateescape")) > _SUBMIT_LINE_MAX \
            or any(len(s.encode("utf-8", "surrogateescape")) > _NAME_MAX
                   for s in (stdout, stderr or "", work_dir, script_path or "")):
        raise _Decline

    # options.job_spec with batch=(...), in its order
    spec: dict[str, Any] = {
        "name": name,
        "num_nodes": min_nodes if nodes_set else None,
        "max_nodes": max_nodes if max_nodes and max_nodes != min_nodes else None,
        "num_tasks": ntasks,
        "gpus": gpus,
        "gpus_per_node": gpus_per_node,
        "gpus_per_task": gpus_per_task,
        "gpu_type": gpu_type,
        "req_nodes": [],
        "exc_nodes": [],
        "submit_line": submit_line,
        "held": "user" if v.get("hold") else None,
        "partition": v.get("partition"),
        "ntasks_per_node": per_node,
        "cpus_per_task": v.get("cpus-per-task"),
        "mem_per_node": v.get("mem"),
        "mem_per_cpu": v.get("mem-per-cpu"),
        "time_limit": v.get("time"),
        "time_min": None,
        "exclusive": False,
        "dependency": v.get("dependency"),
        "begin_time": None,
        "signal": None,
        "mail_type": None,
        "mail_user": None,
        "comment": v.get("comment"),
        "work_dir": work_dir,
        "account": v.get("account"),
        "qos": v.get("qos"),
        "nice": 0,
        "requeue": v.get("requeue"),
        "hint": None,
        "acctg_freq": None,
        "stdout": stdout,
        "stderr": stderr,
        "stdin": "/dev/null",
        "command": script_path,
    }
    export = v.get("export", "ALL")
    payload = {
        "spec": spec,
        "script": script,
        "argv": operands[1:],
        "env": _job_environment(export, env, v, cwd, submit_host, umask, prio),
        "export": export,
        "array": array,
        "open_mode": v.get("open-mode", "truncate"),
    }
    return payload, bool(v.get("parsable"))


def _environ() -> dict[str, str]:
    """dict(os.environ), without importing os."""
    enc = sys.getfilesystemencoding()
    return {k.decode(enc, "surrogateescape"): val.decode(enc, "surrogateescape")
            for k, val in posix.environ.items()}


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b",
            "\f": "\\f"}


def _json_string(text: str) -> str:
    """_json.encode_basestring_ascii(text), without loading _json (a shared library)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = []
    for ch in text:
        escaped = _ESCAPES.get(ch)
        if escaped is None:
            n = ord(ch)
            if 0x20 <= n < 0x7F:
                escaped = ch
            elif n < 0x10000:
                escaped = f"\\u{n:04x}"
            else:
                n -= 0x10000
                escaped = f"\\u{0xD800 | n >> 10:04x}\\u{0xDC00 | n & 0x3FF:04x}"
        out.append(escaped)
    return f'"{"".join(out)}"'


def _json_text(obj: object) -> str:
    if isinstance(obj, str):
        return _json_string(obj)
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if type(obj) is int:
        return str(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(f"{_json_string(k)}:{_json_text(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(_json_text(v) for v in obj) + "]"
    raise _Decline  # nothing else is in a submission


def _json(obj: "Any") -> bytes:
    """client.json_dumps(obj).encode() for a submission's body: the same bytes."""
    return _json_text(obj).encode()


def run(args: list[str]) -> int | None:
    """Submit `sbatch args` and print sbatch's answer; None: the full sbatch must."""
    env = _environ()
    try:
        cwd = posix.getcwd()
    except OSError:
        return None
    umask = posix.umask(0o022)
    posix.umask(umask)
    submit_host = posix.uname().nodename.split(".")[0]
    found = submission(args, env, cwd, submit_host=submit_host, umask=umask,
                       prio=posix.getpriority(posix.PRIO_PROCESS, 0))
    if found is None:
        return None
    payload, parsable = found
    spec = payload["spec"]
    # as sbatch._run: the submission's id (a resent request returns the same job), the host
    spec["submit_id"] = posix.urandom(16).hex()
    spec["submit_host"] = submit_host
    spec["alloc_sid"] = posix.getsid(0)
    try:
        body = _json(payload)
    except _Decline:
        return None
    from corral.cli import hot

    try:
        raw = hot.exchange("POST", "/v1/jobs", body)
    except (ConnectionResetError, BrokenPipeError):
        raw = b""  # lost after sending: sent again below
    except OSError as e:
        return _failed(e.strerror or e)
    if raw is None:
        return None  # nothing sent: sbatch connects itself (and waits for a restart)
    try:
        if not raw:
            return _resend(payload, parsable)  # as client.request: sent again, same submit_id
        return _answer(raw, parsable)
    except Exception as e:  # as client.run_cli: one line, never a traceback
        posix.write(2, f"{PROG}: error: internal error: {type(e).__name__}: {e}\n".encode())
        return 1


def _failed(reason: object) -> int:
    posix.write(2, f"{PROG}: error: Batch job submission failed: {reason}\n".encode())
    return 1


def _answer(raw: bytes, parsable: bool) -> int:
    """client.request's reading of the answer, then sbatch._run's messages."""
    header, _, content = raw.partition(b"\r\n\r\n")
    try:
        status = int(header.split(b"\r\n", 1)[0].split()[1])
    except (IndexError, ValueError):
        return _refused("malformed answer from the controller", {})
    lowered = header.lower()
    number = content[10:-1]
    if status == 200 and content[:10] == b'{"job_id":' and content[-1:] == b"}" \
            and number.isdigit() and (number[:1] != b"0" or number == b"0") \
            and b"transfer-encoding: chunked" not in lowered \
            and b"content-type: text/plain" not in lowered:
        return _submitted(int(number), parsable)  # the controller's answer (orjson's bytes)
    try:
        if b"transfer-encoding: chunked" in lowered:
            from corral.cli.client import _dechunk

            content = _dechunk(content)
        if status < 400 and b"content-type: text/plain" in lowered:
            return _malformed()  # a text answer has no job id
        from corral.cli.client import json_loads

        answer = json_loads(content) if content else None
        if status >= 400:
            if isinstance(answer, dict):
                return _refused(answer.get("error", f"HTTP {status}"), answer)
            return _refused(f"HTTP {status}", {})
        job_id = int(answer["job_id"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return _malformed()
    return _submitted(job_id, parsable)


def _submitted(job_id: int, parsable: bool) -> int:
    from corral.cli.hot import _write

    return _write(f"{job_id}\n".encode() if parsable
                  else f"Submitted batch job {job_id}\n".encode())


def _malformed() -> int:
    return _failed("malformed answer from the controller")


def _refused(message: object, payload: "dict[str, Any]") -> int:
    user_msg = payload.get("user_msg")
    if user_msg:
        posix.write(2, f"{PROG}: error: {user_msg}\n".encode())
    return _failed(message)


def _resend(payload: "dict[str, Any]", parsable: bool) -> int:
    """The connection closed without an answer: sbatch's own client sends the same
    request again (its submit_id makes that safe) and reports as sbatch does."""
    from corral.cli import client

    client.enable_retry(PROG)
    try:
        reply = client.request("POST", "/v1/jobs", payload, idempotent=True)
        job_id = int(reply["job_id"])
    except client.NotRunning as e:
        failed = "Batch job submission failed: " if e.timed_out else ""
        posix.write(2, f"{PROG}: error: {failed}{e}\n".encode())
        return 1
    except client.ApiError as e:
        return _refused(e.message, e.payload)
    except OSError as e:
        return _failed(e.strerror or e)
    except (KeyError, TypeError, ValueError):
        return _malformed()
    return _submitted(job_id, parsable)
