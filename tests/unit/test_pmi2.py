"""The PMI wire protocol of agent/pmi2.py, driven as MPICH's PMI-1 and PMI-2 clients do."""

from __future__ import annotations

from corral.agent.pmi2 import (
    Pmi2Session,
    decode1,
    decode2,
    encode2,
    process_mapping,
    task_environment,
)


def msg2(**kv: str) -> bytes:
    return encode2([(k.replace("_", "-") if k != "cmd" else k, v) for k, v in kv.items()])


def replies2(out: list[tuple[int, bytes]]) -> list[tuple[int, dict[str, str]]]:
    return [(rank, decode2(data[6:].decode())) for rank, data in out]


def init(session: Pmi2Session, rank: int, version: int) -> None:
    out = session.feed(rank, f"cmd=init pmi_version={version} pmi_subversion=0\n".encode())
    assert out == [(rank, f"cmd=response_to_init pmi_version={version} pmi_subversion="
                          f"{0 if version == 2 else 1} rc=0\n".encode())]


def test_process_mapping_blocks() -> None:
    assert process_mapping([0, 0, 1, 1]) == "(vector,(0,2,2))"
    assert process_mapping([0, 0, 0, 1]) == "(vector,(0,1,3),(1,1,1))"
    assert process_mapping([0, 1, 0, 1]) == "(vector,(0,2,1),(0,2,1))"
    assert process_mapping([0]) == "(vector,(0,1,1))"


def test_pmi2_encoding_doubles_semicolons() -> None:
    data = encode2([("cmd", "kvs-put"), ("key", "a;b"), ("value", "x=y;;z")])
    assert data[:6] == f"{len(data) - 6:<6d}".encode()
    assert decode2(data[6:].decode()) == {"cmd": "kvs-put", "key": "a;b", "value": "x=y;;z"}


def test_pmi2_fullinit_put_fence_get() -> None:
    s = Pmi2Session("7.0", [0, 0, 1])
    for rank in range(3):
        init(s, rank, 2)
    r = replies2(s.feed(1, msg2(cmd="fullinit", pmirank="1", threaded="FALSE")))
    assert r[0][1]["rank"] == "1" and r[0][1]["size"] == "3" and r[0][1]["rc"] == "0"
    assert replies2(s.feed(1, msg2(cmd="job-getid")))[0][1]["jobid"] == "7.0"
    got = replies2(s.feed(0, msg2(cmd="info-getjobattr", key="PMI_process_mapping")))
    assert got[0][1]["found"] == "TRUE" and got[0][1]["value"] == "(vector,(0,1,2),(1,1,1))"
    assert replies2(s.feed(0, msg2(cmd="info-getjobattr", key="nope")))[0][1]["found"] == "FALSE"
    for rank in range(3):
        assert replies2(s.feed(rank, msg2(cmd="kvs-put", key=f"bc-{rank}",
                                          value=f"addr;{rank}")))[0][1]["rc"] == "0"
    # before the fence, puts are not seen
    assert replies2(s.feed(2, msg2(cmd="kvs-get", jobid="7.0", key="bc-0")))[0][1]["found"] == \
        "FALSE"
    assert s.feed(0, msg2(cmd="kvs-fence")) == []
    # a message split across reads is put together
    whole = msg2(cmd="kvs-fence")
    assert s.feed(2, whole[:4]) == [] and s.feed(2, whole[4:]) == []
    done = replies2(s.feed(1, msg2(cmd="kvs-fence")))
    assert [rank for rank, _ in done] == [0, 1, 2]
    assert all(d["cmd"] == "kvs-fence-response" and d["rc"] == "0" for _, d in done)
    got = replies2(s.feed(2, msg2(cmd="kvs-get", jobid="7.0", srcid="0", key="bc-0")))
    assert got[0][1] == {"cmd": "kvs-get-response", "rc": "0", "found": "TRUE",
                         "value": "addr;0"}
    assert replies2(s.feed(2, msg2(cmd="finalize")))[0][1]["cmd"] == "finalize-response"
    assert s.finalized == {2}


def test_pmi1_put_barrier_get() -> None:
    s = Pmi2Session("9.1", [0, 0])
    init(s, 0, 1)
    init(s, 1, 1)
    assert decode1(s.feed(0, b"cmd=get_maxes\n")[0][1].decode())["vallen_max"] == "1024"
    assert s.feed(0, b"cmd=get_my_kvsname\n") == [(0, b"cmd=my_kvsname kvsname=9.1\n")]
    assert s.feed(1, b"cmd=put kvsname=9.1 key=k1 value=v1\n") == [(1, b"cmd=put_result rc=0\n")]
    assert s.feed(1, b"cmd=barrier_in\n") == []
    assert s.feed(0, b"cmd=barrier_in\ncmd=get kvsname=9.1 key=k1\n") == [
        (0, b"cmd=barrier_out\n"), (1, b"cmd=barrier_out\n"),
        (0, b"cmd=get_result rc=0 value=v1\n")]
    assert s.feed(0, b"cmd=get kvsname=9.1 key=PMI_process_mapping\n") == [
        (0, b"cmd=get_result rc=0 value=(vector,(0,1,2))\n")]
    assert decode1(s.feed(0, b"cmd=get kvsname=9.1 key=none\n")[0][1].decode())["rc"] == "-1"
    assert s.feed(0, b"cmd=finalize\n") == [(0, b"cmd=finalize_ack\n")]


def test_a_client_that_does_not_init_is_dropped() -> None:
    s = Pmi2Session("1.0", [0])
    assert s.feed(0, b"GET / HTTP/1.0\n") == []
    assert s.conns[0].closed


def test_task_environment() -> None:
    assert task_environment(4, 1, 2, "5.0") == {
        "PMI_FD": "4", "PMI_RANK": "1", "PMI_SIZE": "2", "PMI_JOBID": "5.0",
        "PMI_SPAWNED": "0", "SLURM_MPI_TYPE": "pmi2"}
