"""cli/sbatch_hot.py builds the request the full sbatch builds, for every form it reads, and
leaves every other form to sbatch (tests/e2e/test_hot_commands.py submits through both)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from corral.cli import client, sbatch, sbatch_hot
from corral.cli.options import CliExit
from tests.unit.http_peer import read_request

NOW = 1_800_000_000.0
ENV = {"HOME": "/home/alice", "PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "LANG": "C.UTF-8",
       "FOO": "foo", "ODD": "caf\udce9"}
SCRIPT = "#!/bin/bash\n#SBATCH -J fromscript\n#SBATCH --time=10 -n 2  # a comment\n\necho hi\n"
SRC = str(Path(sbatch_hot.__file__).resolve().parents[2])


def _full(argv: list[str], env: dict[str, str], cwd: str,
          capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], bool] | None:
    """build_payload(parse_sbatch(...)), or None when sbatch stops with an error; fails
    when it would print anything before submitting."""
    try:
        sub = sbatch.parse_sbatch(argv, dict(env), None, cwd, NOW, submit_host="login1",
                                  umask=0o027, prio=3)
    except CliExit:
        return None
    finally:
        printed = capsys.readouterr()
    if sub.messages or printed.err or sub.quiet or sub.wait or sub.verbose:
        return {"messages": sub.messages, "err": printed.err}, False
    return sbatch.build_payload(sub), sub.parsable


def _fast(argv: list[str], env: dict[str, str], cwd: str) -> tuple[dict[str, Any], bool] | None:
    return sbatch_hot.submission(argv, dict(env), cwd, submit_host="login1", umask=0o027,
                                 prio=3)


def _agree(argv: list[str], cwd: str, capsys: pytest.CaptureFixture[str],
           env: dict[str, str] = ENV) -> bool:
    """The fast path's request is the full path's, byte for byte; True when it gave one."""
    fast = _fast(argv, env, cwd)
    if fast is None:
        return False
    full = _full(argv, env, cwd, capsys)
    assert full is not None, argv  # the fast path must never accept what sbatch refuses
    assert fast == full, argv
    assert sbatch_hot._json(fast[0]) == client.json_dumps(full[0]).encode(), argv
    return True


@pytest.fixture
def workdir(tmp_path: Path) -> str:
    (tmp_path / "job.sh").write_text(SCRIPT)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.sh").write_text("#!/bin/sh\n#SBATCH --array=1-4%2 -o out/%A_%a\n"
                                           "#SBATCH -H --parsable\ntrue\n")
    (tmp_path / "plain.sh").write_text("#!/bin/sh\ntrue\n")
    return str(tmp_path)


# The forms tools use: each is answered by the fast path, with sbatch's own request.
READ_FORMS = [
    ["--wrap", "true"], ["--wrap=sleep 1"], ["-H", "--wrap", "true"], ["--parsable", "--wrap=x"],
    ["job.sh"], ["job.sh", "arg1", "-x"], ["./job.sh"], ["sub/b.sh"], ["plain.sh"],
    ["-J", "name", "-o", "o.txt", "-e", "/tmp/e.txt", "-p", "debug", "job.sh"],
    ["-Jname", "-t", "1:00:00", "-N", "2", "--wrap", "true"],
    ["-N", "2", "-n", "4", "--wrap", "true"], ["-N2", "-n8", "-c4", "--wrap", "true"],
    ["-n", "3", "--wrap", "true"], ["-t", "0", "--wrap", "true"], ["-t", "UNLIMITED", "--wrap=t"],
    ["-t", "2-3", "--wrap=t"], ["-t", "1-2:30:05", "--wrap=t"], ["-t", "5:30", "--wrap=t"],
    ["--time=90", "--wrap=t"], ["--mem=4G", "--wrap=t"], ["--mem", "500", "--wrap=t"],
    ["--mem=1k", "--wrap=t"], ["--mem=2TB", "--wrap=t"], ["--mem=0", "--wrap=t"],
    ["--gres=gpu:2", "--wrap=t"], ["--gres=gpu", "--wrap=t"], ["--gres=gpu:a100:2", "--wrap=t"],
    ["--gres=gpu:a100", "--wrap=t"], ["--gpus=4", "--wrap=t"], ["-G", "a100:2", "--wrap=t"],
    ["--gpus-per-node=2", "--gpus-per-task=1", "--wrap=t"], ["--gpus=gpu:h100:8", "--wrap=t"],
    ["-A", "Proj", "-q", "high", "--wrap=t"], ["--account=a", "--qos=b", "job.sh"],
    ["--array=0-9", "--wrap=t"], ["-a", "1,3,5-9:2%3", "--wrap=t"], ["--array", "7", "job.sh"],
    ["--dependency=afterok:12:13", "--wrap=t"], ["-d", "singleton", "--wrap=t"],
    ["--export=NONE", "--wrap=t"], ["--export=ALL,X=1", "--wrap=t"],
    ["--export=FOO,BAR=2,MISSING", "--wrap=t"], ["--export", "NONE,SLURM_X=9", "--wrap=t"],
    ["-o", "none", "-e", "NONE", "--wrap=t"], ["-HJx", "--wrap=t"], ["-J", "", "--wrap=t"],
    ["-J", "naïve", "--wrap=t"], ["-p", "a,b", "--wrap=t"],
    ["--ntasks-per-node=4", "--wrap=t"], ["-N", "2", "--ntasks-per-node", "3", "--wrap=t"],
    ["--mem-per-cpu=2G", "--wrap=t"], ["--comment", "rule_a", "--wrap=t"],
    ["--requeue", "--wrap=t"], ["--no-requeue", "--wrap=t"], ["--open-mode=append", "--wrap=t"],
    ["--open-mode", "t", "--wrap=t"],
    # Snakemake's slurm executor, as it calls sbatch for each job
    ["--parsable", "--job-name", "0f3c9a", "--output", "logs/%j.log", "--export=ALL",
     "--comment", "rule_a_wildcards_x", "-A", "acct", "-p", "debug", "-t", "60", "--mem",
     "1000", "--ntasks=1", "--cpus-per-task=2", "--wrap=snakemake --rerun x"],
]


@pytest.mark.parametrize("argv", READ_FORMS, ids=" ".join)
def test_fast_path_builds_what_sbatch_builds(argv: list[str], workdir: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _agree(argv, workdir, capsys)


def test_script_options_and_precedence(workdir: str, capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    (tmp_path / "many.sh").write_text(
        "#!/bin/sh\n\n# a comment\n#SBATCH -J one\n#SBATCH   --job-name=two -p debug\n"
        "#Some other comment\n#SBATCH --mem=1G#c\n#SBATCH -t 5 #SBATCH -t 9\n"
        "#SBATCH\n   \necho body\n#SBATCH -J ignored\n")
    assert _agree(["many.sh"], workdir, capsys)
    assert _agree(["-J", "cli", "-t", "7", "many.sh"], workdir, capsys)
    fast = _fast(["many.sh"], ENV, workdir)
    assert fast is not None and fast[0]["spec"]["name"] == "two"
    assert fast[0]["spec"]["time_limit"] == 300 and fast[0]["spec"]["mem_per_node"] == 1024


# Forms left to sbatch: other options, abbreviations, values it might refuse or read in
# ways not copied here, messages before submitting, the script on stdin or on $PATH.
DECLINED = [
    [], ["--wrap"], ["-v", "--wrap=t"], ["-Q", "--wrap=t"], ["--job=x", "--wrap=t"],
    ["--", "job.sh"], ["--time-min=5", "--wrap=t"], ["-w", "node-1", "--wrap=t"],
    ["--mail-type=END", "--wrap=t"], ["-t", "1:2:3:4", "--wrap=t"], ["-t", "", "--wrap=t"],
    ["-t", "x", "--wrap=t"], ["-t", "1-", "--wrap=t"], ["-N", "1-2", "--wrap=t"],
    ["-N", "0", "--wrap=t"], ["-N", "2k", "--wrap=t"], ["-n", "0", "--wrap=t"],
    ["-n", "+2", "--wrap=t"], ["-N", "3", "-n", "2", "--wrap=t"], ["-N", "2", "-n", "1", "--wrap=t"], ["--mem=1.5G", "--wrap=t"],
    ["--mem=-1", "--wrap=t"], ["--mem=4X", "--wrap=t"], ["--gres=gpu:10k", "--wrap=t"],
    ["--gres=gpu:-1", "--wrap=t"], ["--gres=nic:1", "--wrap=t"], ["--gres=help", "--wrap=t"],
    ["--gres=gpu:1,gpu:2", "--wrap=t"], ["--gpus=a:b:c", "--wrap=t"],
    ["--array=5-1", "--wrap=t"], ["--array=1-5:0", "--wrap=t"], ["--array=x", "--wrap=t"],
    ["--array=99999999", "--wrap=t"], ["--export=\"A,B\"", "--wrap=t"], ["-p", "", "--wrap=t"],
    ["-J", "x" * 2000, "--wrap=t"], ["--hold=1", "--wrap=t"], ["--wrap=t", "job.sh"],
    ["missing.sh"], ["sub"], [":", "job.sh"], ["../job.sh"], ["sub//b.sh"], ["-"],
    ["-J"], ["-t", "١٢", "--wrap=t"], ["--mem=1G", "--mem-per-cpu=1G", "--wrap=t"],
    ["--open-mode=x", "--wrap=t"], ["--tasks-per-node=2", "--wrap=t"], ["-O", "--wrap=t"],
]


@pytest.mark.parametrize("argv", DECLINED, ids=" ".join)
def test_other_forms_are_left_to_sbatch(argv: list[str], workdir: str) -> None:
    assert _fast(argv, ENV, workdir) is None


@pytest.mark.parametrize("script", [
    "#!/bin/sh\n#SBATCH --time-min=5\ntrue\n",  # an option not read here
    "#!/bin/sh\n#SBATCH -J 'quoted name'\ntrue\n",
    "#!/bin/sh\n#SBATCH -J a\\ b\ntrue\n",
    "#!/bin/sh\n#SLURM -J old\ntrue\n",  # sbatch warns first
    "#!/bin/sh\n#SBATCH hetjob\ntrue\n",
    "#!/bin/sh\n#SBATCH :\ntrue\n",
    "#!/bin/sh\n#SBATCHX\ntrue\n",  # "Invalid directive"
    "#!/bin/sh\n#SBATCH --wrap=x\ntrue\n",  # ignored by sbatch there
    "#!/bin/sh\n#SBATCH -v\ntrue\n",
    "#!/bin/sh\r\ntrue\r\n", "echo no shebang\n", "#!/bin/sh\0\n", "",
])
def test_scripts_left_to_sbatch(script: str, tmp_path: Path) -> None:
    (tmp_path / "s.sh").write_text(script)
    assert _fast(["s.sh"], ENV, str(tmp_path)) is None


@pytest.mark.parametrize("var", sorted({var for var, _ in sbatch.SBATCH_ENV_VARS}
                                       | {"PYXIS_CONTAINER_IMAGE"}))
def test_sbatch_variables_leave_it_to_sbatch(var: str, workdir: str) -> None:
    assert _fast(["--wrap=t"], ENV, workdir) is not None
    assert _fast(["--wrap=t"], {**ENV, var: "1"}, workdir) is None


VALUES = {
    "-J": ["a", "", "x y", "naïve"], "-o": ["o.txt", "/abs/o", "none", "%j.out", ""],
    "-e": ["e.txt", "NONE"], "-p": ["debug", "", "a,b"],
    "-t": ["10", "0", "1:00", "1:00:00", "2-0", "1-1:1:1", "UNLIMITED", " 5", "5 ", "x", "-1",
           "1-", "1::2"],
    "-N": ["1", "2", "4", "0", "1-2", "3k"], "-n": ["1", "2", "8", "0", "+3", "x"],
    "-c": ["1", "4", "0", "2147483648"],
    "--mem": ["1", "4G", "4gb", "512M", "1K", "0", "1.5G", "4X", "4GG", "-2"],
    "--gres": ["gpu", "gpu:1", "gpu:a100:2", "gpu:a100", "gpu:0", "gpu:1k", "nic", "gpu:1:2"],
    "--gpus": ["1", "a100:2", "gpu:a100:1", "0", "x:", ":1"],
    "--gpus-per-node": ["2", "h100:4"], "--gpus-per-task": ["1", "1x"],
    "-A": ["acct", "ACCT"], "-q": ["normal"],
    "--array": ["0-3", "1,2,7", "0-15:4%2", "3-1", "1-2:0", "a", "4000001", "1%x", "%2"],
    "-d": ["afterok:1", "singleton", "after:1?afterany:2"],
    "--export": ["ALL", "NONE", "FOO", "NONE,FOO,X=1", "ALL,X=2", "", ",", "none,SLURM_Y=1"],
    "--ntasks-per-node": ["1", "3", "0"], "--mem-per-cpu": ["100", "1G", "x"],
    "--comment": ["a comment", "c"], "--open-mode": ["append", "truncate", "A", "x"],
    "-H": [], "--parsable": [], "--requeue": [], "--no-requeue": [],
}


def test_random_forms_agree_with_sbatch(workdir: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Random mixes of options on the command line and in #SBATCH lines: whenever the fast
    path answers, sbatch builds the same request (and it answers often enough to tell)."""
    rng = random.Random(19)
    answered = 0
    for n in range(400):
        cli: list[str] = []
        lines: list[str] = []
        for _ in range(rng.randint(0, 5)):
            opt = rng.choice(sorted(VALUES))
            words = [opt] if not VALUES[opt] else [opt, rng.choice(VALUES[opt])]
            if words[0].startswith("--") and len(words) == 2 and rng.random() < 0.5:
                words = [f"{words[0]}={words[1]}"]
            if rng.random() < 0.4 and all(" " not in w and w for w in words):
                lines.append("#SBATCH " + " ".join(words))
            else:
                cli.extend(words)
        if rng.random() < 0.5:
            argv = [*cli, "--wrap", "echo hi"]
        else:
            (tmp_path / f"r{n}.sh").write_text("#!/bin/sh\n" + "".join(f"{ln}\n" for ln in lines)
                                               + "echo hi\n")
            argv = [*cli, f"r{n}.sh", "arg"]
        answered += _agree(argv, workdir, capsys)
    assert answered > 100


def _sbatch_against(home: Path, workdir: str, answer: bytes, code: str) -> tuple[int, str, str]:
    """`code` (sbatch --wrap true, fast or full) in a fresh interpreter against a socket
    that answers `answer` to the first request, then closes: (exit code, stdout, stderr)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(home / "corral.sock"))
    server.listen(1)
    server.settimeout(30)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            read_request(conn)
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_",
                                                                    "PYXIS_"))}
    env.update(CORRAL_HOME=str(home), PYTHONPATH=SRC)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60, cwd=workdir)
    thread.join(30)
    server.close()
    os.unlink(home / "corral.sock")
    return r.returncode, r.stdout, r.stderr


def _http(status: str, body: bytes, kind: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


FAST = ("import sys; from corral.cli import sbatch_hot; "
        "sys.exit(sbatch_hot.run(sys.argv[1:] or ['--wrap', 'true']))")
FULL = "import sys; from corral.cli import sbatch; sys.exit(sbatch.main(['--wrap', 'true']))"


@pytest.mark.parametrize("answer", [
    _http("200 OK", b'{"job_id": 42}'),
    _http("200 OK", b'{"job_id":42}'),  # the controller's own (read without client.py)
    _http("200 OK", b'{"job_id":0042}'),
    _http("200 OK", b'{"job_id":0}'),
    _http("200 OK", b'{"job_id": "43"}'),
    _http("200 OK", b'{"id": 1}'),
    _http("200 OK", b"not json"),
    _http("200 OK", b"12", "text/plain"),
    _http("400 Bad Request", b'{"error": "Invalid partition name specified"}'),
    _http("400 Bad Request", b'{"error": "Invalid account", "user_msg": "ask your admin"}'),
    _http("500 Internal Server Error", b"[1]"),
    _http("500 Internal Server Error", b""),
    _http("403 Forbidden", b"{bad"),
    b"garbage\r\n\r\n",
])
def test_answers_are_reported_as_sbatch_reports_them(answer: bytes, tmp_path: Path) -> None:
    fast = _sbatch_against(tmp_path, str(tmp_path), answer, FAST)
    full = _sbatch_against(tmp_path, str(tmp_path), answer, FULL)
    assert fast == full
    assert "internal error" not in fast[2]  # a malformed body is the controller's fault


def test_parsable_prints_the_id_alone(tmp_path: Path) -> None:
    code = FAST.replace("sys.argv[1:] or ", "").replace("['--wrap', 'true']",
                                                         "['--parsable', '--wrap', 'true']")
    assert _sbatch_against(tmp_path, str(tmp_path), _http("200 OK", b'{"job_id": 9}'),
                           code) == (0, "9\n", "")


def test_no_controller_leaves_it_to_sbatch(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_"))}
    env.update(CORRAL_HOME=str(tmp_path / "nowhere"), PYTHONPATH=SRC)
    r = subprocess.run([sys.executable, "-c", "from corral.cli import sbatch_hot; "
                        "print(sbatch_hot.run(['--wrap', 'true']))"], capture_output=True,
                       text=True, env=env, timeout=60, cwd=str(tmp_path))
    assert r.stdout == "None\n" and r.stderr == ""


def test_json_is_client_json() -> None:
    rng = random.Random(7)
    alphabet = ['"', "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f", "\x80", "é",
                "\u2028", "\udce9", "\ud800", "\U0001f600", "a", " ", "/", "~", "'"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
        obj = {text: [text, None, True, False, 0, -12, 2**40, {"k": text}], "e": {}, "l": []}
        assert sbatch_hot._json(obj) == client.json_dumps(obj).encode(), text


def test_its_options_and_constants_are_sbatchs() -> None:
    from corral.cli.options import NO_ARG, option_table
    from corral.model.arrays import MAX_ARRAY_SIZE_LIMIT

    table = option_table("sbatch")
    by_name = {o.name: o for o in table.options}
    for name, (key, takes) in sbatch_hot._LONG.items():
        option = by_name[name]
        assert (option.key, option.has_arg != NO_ARG) == (key, takes), name
    for letter, key in sbatch_hot._SHORT.items():
        assert table.shorts[letter].key == key, letter
    assert sbatch_hot.WRAP_HEADER == sbatch.WRAP_HEADER
    assert sbatch_hot._ARRAY_LIMIT == MAX_ARRAY_SIZE_LIMIT
