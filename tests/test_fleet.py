"""`kbopt fleet` without Prometheus: a fake server on loopback for each way a server can fail,
the all-or-nothing output folder, and `advise --facts-jsonl`."""
from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from prometheus_harness import loopback_server

from kbopt.batch import _advise_chunk as _advise_a_chunk
from kbopt.collectors.fleet import FAMILIES, PrometheusClient, host_of, missing_families, read_fleet
from kbopt.fleet import slug, write_directory

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class FakePrometheus:
    """Answers /api/v1/query with `respond(query) -> (status, body)`; counts the requests."""

    def __init__(self, respond):
        self.requests = 0

        def answer(method, path, body):
            self.requests += 1
            status, reply = respond(parse_qs(body.decode())["query"][0])
            return status, "application/json", reply if isinstance(reply, bytes) else json.dumps(reply).encode()
        self.server = loopback_server(answer)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    servers = []

    def start(respond):
        servers.append(FakePrometheus(respond))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


def vector(rows, warnings=None):
    body = {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": m, "value": [0, str(v)]} for m, v in rows]}}
    if warnings:
        body["warnings"] = warnings
    return 200, body


def fleet_of(replicas: int, warnings=None):
    """Answers as a Prometheus holding `replicas` vLLM replicas (running requests only)."""
    def respond(query):
        if "vllm:num_requests_running" in query:
            return vector([({"instance": f"10.0.0.{i}:8000", "model_name": "m"}, 3.0) for i in range(replicas)], warnings)
        return vector([], warnings)
    return respond


def test_every_family_the_collector_reads_is_queried():
    assert missing_families() == set()


def test_host_of():
    assert host_of("10.0.0.5:8000") == "10.0.0.5"
    assert host_of("[fe80::1]:9400") == "fe80::1"
    assert host_of("node-a") == "node-a"


def test_slug_is_a_plain_file_name():
    name = slug("../../etc/passwd <script>")
    assert "/" not in name and ".." not in name and "<" not in name
    assert slug("a/b") != slug("a-b")


def test_query_count_is_fixed(fake):
    counts = []
    for replicas in (1, 50):
        server = fake(fleet_of(replicas))
        client = PrometheusClient(server.url)
        read = read_fleet(client, "5m")
        assert len(read.replicas) == replicas
        counts.append((client.queries, server.requests))
    assert counts[0] == counts[1] == (len(FAMILIES), len(FAMILIES))


def test_retries_a_server_error_then_succeeds(fake):
    seen, lock = set(), threading.Lock()

    def first_refused(query):               # each query's first try fails as a busy server's would
        with lock:
            retry = query in seen
            seen.add(query)
        return fleet_of(1)(query) if retry else (503, {"status": "error", "error": "busy"})
    server = fake(first_refused)
    client = PrometheusClient(server.url, retries=2, sleep=lambda s: None)
    assert len(read_fleet(client, "5m").replicas) == 1


def test_unreachable_server_exits_2(run_cli, tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # closed again: nothing listens there
    code, _, err = run_cli("fleet", "--prometheus", f"http://127.0.0.1:{port}", "--retries", "0",
                           "-o", str(tmp_path / "out"))
    assert code == 2 and "cannot reach it" in err and not (tmp_path / "out").exists()


def test_bad_query_is_not_retried_and_says_why(fake, run_cli):
    server = fake(lambda q: (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}))
    code, _, err = run_cli("fleet", "--prometheus", server.url, "--selector", '{namespace="llm"}')
    assert code == 2 and "HTTP 400" in err and "parse error at char 5" in err
    assert server.requests < len(FAMILIES)      # no retry, and the queries not yet sent are dropped


def test_timeout_exits_2(fake, run_cli):
    server = fake(lambda q: (time.sleep(1.5), vector([]))[1])
    code, _, err = run_cli("fleet", "--prometheus", server.url, "--timeout", "0.3", "--retries", "0")
    assert code == 2 and ("no answer within 0.3 s" in err or "timed out" in err), err


def test_not_prometheus_exits_2(fake, run_cli):
    server = fake(lambda q: (200, b"<html>login</html>"))
    code, _, err = run_cli("fleet", "--prometheus", server.url)
    assert code == 2 and "not JSON" in err


def test_no_deployment_exits_2(fake, run_cli):
    server = fake(fleet_of(0))
    code, _, err = run_cli("fleet", "--prometheus", server.url, "--selector", '{namespace="none"}')
    assert code == 2 and "no vLLM, SGLang, TGI or Triton series under" in err


def test_partial_answer_is_reported(fake, run_cli, tmp_path):
    server = fake(fleet_of(2, warnings=["remote read of store b failed"]))
    code, _, err = run_cli("fleet", "--prometheus", server.url, "-o", str(tmp_path / "out"))
    assert code == 0 and "Prometheus answered in part" in err and "store b failed" in err
    assert "Partial answer" in (tmp_path / "out" / "index.html").read_text()
    (record,) = [json.loads(line) for line in (tmp_path / "out" / "fleet.jsonl").read_text().splitlines()]
    assert len(record["replicas"]) == 2 and "telemetry.compute_utilization" in record["missing"]


def test_without_output_fleet_jsonl_goes_to_stdout(fake, run_cli):
    server = fake(fleet_of(1))
    code, out, _ = run_cli("fleet", "--prometheus", server.url)
    assert code == 0 and json.loads(out)["kbopt"] == "fleet/1"


def test_bad_window_and_selector(run_cli):
    assert run_cli("fleet", "--prometheus", "http://127.0.0.1:1", "--window", "soon")[0] == 2
    assert "braces" in run_cli("fleet", "--prometheus", "http://127.0.0.1:1", "--selector", 'namespace="x"')[2]


def test_directory_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "out"
    write_directory({"fleet.jsonl": "{}\n", "index.html": "old"}, str(target))
    calls = []
    original = Path.write_text

    def interrupted(self, *args, **kwargs):
        calls.append(self)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)
    monkeypatch.setattr(Path, "write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_directory({"fleet.jsonl": "new\n", "index.html": "new", "deployments/a.html": "x"}, str(target))
    monkeypatch.undo()
    assert (target / "index.html").read_text() == "old"          # the earlier output, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # and no temporary folder left
    write_directory({"fleet.jsonl": "new\n", "deployments/a.html": "x"}, str(target))
    assert sorted(p.name for p in target.iterdir()) == ["deployments", "fleet.jsonl"]


def test_directory_refuses_a_folder_of_other_things(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    from kbopt.errors import KboptError
    with pytest.raises(KboptError, match="not an earlier kbopt fleet output"):
        write_directory({"fleet.jsonl": ""}, str(tmp_path))


# ------------------------------------------------------------------ advise --facts-jsonl


def _lines() -> str:
    good = json.dumps(json.loads((EXAMPLES / "capacity-a100-chat.json").read_text()))
    return "\n".join([good, "{not json", json.dumps({"telemetry": {"memory_used_ratio": 93}}), good]) + "\n"


def test_facts_jsonl_one_line_out_per_line_in(run_cli, tmp_path, monkeypatch):
    path = tmp_path / "facts.jsonl"
    path.write_text(_lines())
    code, out, err = run_cli("advise", "--facts-jsonl", str(path))
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 2 and "2 of 4 lines could not be advised" in err
    assert [line["kbopt"] for line in lines] == ["advice/2", "error", "error", "advice/2"]
    assert lines[1]["line"] == 2 and "facts.jsonl:2: not valid JSON" in lines[1]["error"]
    assert lines[2]["line"] == 3 and "percentage" in lines[2]["error"]
    assert lines[0] == lines[3] and lines[0]["bottleneck"] == "memory_capacity"
    single = run_cli("advise", "--facts", str(EXAMPLES / "capacity-a100-chat.json"), "--format", "json")[1]
    assert lines[0] == json.loads(single)             # the same advice as one file gives

    monkeypatch.setattr("sys.stdin", io.StringIO(_lines().split("\n")[0] + "\n"))
    code, out, _ = run_cli("advise", "--facts-jsonl", "-", "-o", str(tmp_path / "advice.jsonl"))
    assert code == 0 and out == ""
    assert json.loads((tmp_path / "advice.jsonl").read_text())["kbopt"] == "advice/2"


def test_facts_jsonl_workers_are_spawned_where_another_thread_runs():
    """A fork copies only the thread that forks, with every lock as it was: where another
    thread runs, the workers start as new interpreters."""
    import threading

    from kbopt import batch
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert batch._start_method() == "spawn"
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize("to, output", [("group", True), ("group", False), ("main", False)])
def test_facts_jsonl_stopped_by_sigterm_while_its_workers_wait_for_lines(tmp_path, to, output):
    """`producer | kbopt advise --facts-jsonl - [-o OUT]`, the workers idle while the producer is
    slow, then SIGTERM: to the whole process group (`timeout`, systemd, a closed terminal's SIGHUP
    alike) or to kbopt alone. It stops as Ctrl-C stops it, writes no file, leaves no folder and
    no worker. Killed outright by the signal's default, an idle worker kept the task queue's lock
    it waits with, and kbopt then waited for it forever."""
    import os
    import signal
    import subprocess
    import sys
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "advice.jsonl"
    command = [sys.executable, "-m", "kbopt", "advise", "--facts-jsonl", "-", "--jobs", "2", *(["-o", str(out)] if output else [])]
    kbopt = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env={**os.environ, "TMPDIR": str(tmp_path / "tmp")}, start_new_session=True)
    assert kbopt.stdin is not None
    kbopt.stdin.write((_lines() * 20).encode()[: 70 * 1024])   # more than a chunk (64 lines), then nothing
    kbopt.stdin.flush()
    time.sleep(3)                     # the first chunk advised: the workers wait for the next
    if to == "group":
        os.killpg(kbopt.pid, signal.SIGTERM)
    else:
        kbopt.send_signal(signal.SIGTERM)
    try:
        _, err = kbopt.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(kbopt.pid, signal.SIGKILL)
        kbopt.communicate()
        pytest.fail(f"kbopt was still running 60 s after SIGTERM to its {to}")
    assert kbopt.returncode == 128 + signal.SIGTERM and b"Traceback" not in err, err.decode()[-2000:]
    assert not out.exists() and list((tmp_path / "tmp").iterdir()) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(kbopt.pid, 0)       # no worker left in its group


def _worker_exits_after_shutdown(monkeypatch) -> list:
    """The exit codes of the workers of each pool a batch shuts down (a negative one: killed)."""
    from concurrent.futures import ProcessPoolExecutor
    exits: list = []
    shutdown = ProcessPoolExecutor.shutdown

    def recorded(pool, *args, **kwargs):
        workers = list((pool._processes or {}).values())
        shutdown(pool, *args, **kwargs)
        exits.extend(worker.exitcode for worker in workers)
    monkeypatch.setattr(ProcessPoolExecutor, "shutdown", recorded)
    return exits


def _advise_chunk_or_die(chunk):
    """A worker's task that kills its worker at the chunk holding line 5 (as the kernel's
    out-of-memory killer would), and advises any other chunk."""
    import os
    import signal

    if chunk[0][0] == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return _advise_a_chunk(chunk)


def test_facts_jsonl_a_worker_killed_midway_is_an_error_not_a_wait(run_cli, tmp_path, monkeypatch):
    """A worker that dies (killed from outside, out of memory) fails the batch at once, exit 2
    naming what happened, with no output file and no folder left: multiprocessing.Pool, which
    kbopt used before, waited for the lost task forever."""
    import tempfile

    from kbopt import batch
    if batch._start_method() != "fork":
        pytest.skip("the task that kills its worker reaches the workers through a fork")
    path = tmp_path / "facts.jsonl"
    path.write_text(_lines() * 10)
    monkeypatch.setattr("kbopt.batch.CHUNK", 4)
    monkeypatch.setattr(batch, "_advise_chunk", _advise_chunk_or_die)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    out = tmp_path / "advice.jsonl"
    code, _, err = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "2", "-o", str(out))
    assert code == 2 and "a worker process ended abruptly" in err and "out of memory" in err, err
    assert not out.exists() and list((tmp_path / "tmp").iterdir()) == []


def test_facts_jsonl_stopped_workers_that_outlast_the_wait_are_killed_and_no_other_process(run_cli, tmp_path, monkeypatch):
    """A stopped batch whose pool does not shut down within STOP_WAIT has its workers killed, so
    that kbopt can exit; a child process its caller started before the batch is left alone."""
    import multiprocessing
    import signal
    from concurrent.futures import ProcessPoolExecutor

    from kbopt import batch
    if batch._start_method() != "fork":
        pytest.skip("this process runs other threads")
    bystander = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    bystander.start()
    released = threading.Event()
    workers: list = []
    shutdown = ProcessPoolExecutor.shutdown

    def stuck(pool, wait=True, *, cancel_futures=False):
        workers.extend((pool._processes or {}).values())
        if cancel_futures:               # the stopping shutdown never returns in time
            released.wait(30)
        shutdown(pool, wait=wait, cancel_futures=cancel_futures)

    def interrupted(block, out):
        raise KeyboardInterrupt
    path = tmp_path / "facts.jsonl"
    path.write_text(_lines() * 10)
    monkeypatch.setattr("kbopt.batch.CHUNK", 4)
    monkeypatch.setattr(batch, "STOP_WAIT", 0.5)
    monkeypatch.setattr(ProcessPoolExecutor, "shutdown", stuck)
    monkeypatch.setattr(batch, "_copy_block", interrupted)
    try:
        code, _, _ = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "2")
        assert code == 130 and len(workers) == 2
        for worker in workers:
            worker.join(5)
        assert [worker.exitcode for worker in workers] == [-signal.SIGKILL] * 2
        assert bystander.is_alive()
    finally:
        released.set()
        bystander.kill()
        bystander.join()


def test_facts_jsonl_workers_of_a_finished_batch_exit_on_their_own(run_cli, tmp_path, monkeypatch):
    """Every task done, the workers are told to exit and waited for: none is ended with a signal
    (which a worker could miss, and the pool then wait for it forever)."""
    path = tmp_path / "facts.jsonl"
    path.write_text(_lines() * 10)
    monkeypatch.setattr("kbopt.batch.CHUNK", 4)
    exits = _worker_exits_after_shutdown(monkeypatch)
    code, _, _ = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "2", "-o", str(tmp_path / "out.jsonl"))
    assert code == 2 and len((tmp_path / "out.jsonl").read_text().splitlines()) == 40
    assert exits == [0, 0]


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_facts_jsonl_in_worker_processes_keeps_the_order(run_cli, tmp_path, monkeypatch, start):
    """Workers forked (a process with no other thread, on Linux) or spawned give the lines of
    one process, in order."""
    from kbopt import batch
    if batch._start_method() == "fork":         # this process may fork: pytest runs no other thread
        monkeypatch.setattr(batch, "_start_method", lambda: start)
    elif start == "fork":
        pytest.skip("this process runs other threads: workers are spawned here")
    path = tmp_path / "facts.jsonl"
    path.write_text(_lines() * 10)     # 40 lines in chunks of 4: several chunks in flight at once
    monkeypatch.setattr("kbopt.batch.CHUNK", 4)
    one = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "1")
    two = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "2")
    assert one[0] == two[0] == 2 and one[1] == two[1] and len(one[1].splitlines()) == 40


def test_facts_jsonl_workers_hand_their_lines_over_in_files_left_behind_by_none(run_cli, tmp_path, monkeypatch):
    """The workers write each chunk's lines to a file of a temporary folder, which the output
    takes in order (copied in the kernel into a file, read and written into a stream): the
    same bytes as advising in this process, to a file or standard output, and no folder is
    left, also when interrupted. A temporary folder that cannot be made is exit 2, saying so."""
    import tempfile
    path = tmp_path / "facts.jsonl"
    path.write_text(_lines() * 10)
    monkeypatch.setattr("kbopt.batch.CHUNK", 4)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    one = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "1", "-o", str(tmp_path / "one.jsonl"))
    two = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "2", "-o", str(tmp_path / "two.jsonl"))
    assert one[0] == two[0] == 2
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    assert run_cli("advise", "--facts-jsonl", str(path), "--jobs", "2")[1].encode() == (tmp_path / "one.jsonl").read_bytes()
    assert list((tmp_path / "tmp").iterdir()) == []

    from kbopt import batch
    copied = []

    def interrupted(block, out):
        copied.append(block)
        if len(copied) == 3:
            raise KeyboardInterrupt
        original(block, out)
    original = batch._copy_block
    monkeypatch.setattr(batch, "_copy_block", interrupted)
    # Stopped midway, the workers skip what is left and exit on their own, none killed:
    # a worker killed while it hands its result back can leave a lock of the pool held.
    exits = _worker_exits_after_shutdown(monkeypatch)
    code, _, err = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "2", "-o", str(tmp_path / "three.jsonl"))
    assert code == 130 and "nothing was written" in err
    assert not (tmp_path / "three.jsonl").exists() and list((tmp_path / "tmp").iterdir()) == []
    assert exits == [0, 0]
    monkeypatch.undo()

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    code, _, err = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "2")
    assert code == 2 and "cannot make a folder in" in err and "--jobs 1" in err


def test_facts_jsonl_output_through_a_fifo_or_a_symlink_as_write_output_does(run_cli, tmp_path):
    """-o a FIFO is written through (its reader gets the lines; replaced by a file, it waited
    forever), -o a symlink replaces the file it points to and keeps the link, as one advice's -o."""
    import os
    path = tmp_path / "facts.jsonl"
    path.write_text(_lines())
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    code, _, _ = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "1", "-o", str(fifo))
    reader.join(timeout=10)
    assert code == 2 and not fifo.is_file() and len(received[0].splitlines()) == 4
    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    real.write_text("old\n")
    link.symlink_to(real)
    code, _, _ = run_cli("advise", "--facts-jsonl", str(path), "--jobs", "2", "-o", str(link))
    assert code == 2 and link.is_symlink() and real.read_text() == received[0]
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    code, _, err = run_cli("advise", "--facts-jsonl", str(path), "-o", str(tmp_path / "loop"))
    assert code == 2 and "cannot write there" in err
    code, _, err = run_cli("advise", "--facts-jsonl", str(path), "-o", "")
    assert code == 2 and "-o: the file name is empty" in err


def test_facts_jsonl_refuses_other_formats(run_cli, tmp_path):
    (tmp_path / "f.jsonl").write_text("{}\n")
    assert run_cli("advise", "--facts-jsonl", str(tmp_path / "f.jsonl"), "--format", "html")[0] == 2


def test_facts_jsonl_lines_are_what_the_standard_encoder_writes():
    """orjson writes the lines (kbopt.batch.json_line): byte for byte the standard encoder's
    compact form, in UTF-8, on every example's advice; a float under 1e-4 is spelt without an
    exponent but reads back the same; what orjson refuses goes to the standard encoder, a lone
    surrogate written as its escape."""
    from kbopt.batch import json_line
    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.pack.packs import load_checked_pack
    from kbopt.kb.facts import load_facts

    def standard(record):
        return json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))

    pack = load_checked_pack([])
    for example in sorted(EXAMPLES.glob("*.json")):
        record = advise(load_facts(example), pack, "reference").to_dict()
        assert json_line(record) == standard(record).encode(), example.name
    small = {"share": 1e-05, "text": "é \u2028 \x00 \" \\ \n", "nested": [1, 2.5, None, True, {}]}
    assert json.loads(json_line(small)) == small and json_line(small).startswith(b'{"share":0.00001,')
    refused = {"big": 2 ** 70, 3: "key", "lone": "\udc80"}
    assert json_line(refused) == b'{"big":1180591620717411303424,"3":"key","lone":"\\udc80"}'
    assert json.loads(json_line(refused)) == {"big": 2 ** 70, "3": "key", "lone": "\udc80"}


def test_many_advices_sets_the_collector_for_a_block_and_restores_it():
    """kbopt fleet and --facts-jsonl advise under kbopt.gctuning's settings (the pack frozen out
    of the collector's sight, the youngest generation collected every YOUNG_OBJECTS
    allocations), and leave the collector of the process that called them as it was."""
    import gc

    from kbopt.gctuning import YOUNG_OBJECTS, many_advices
    before = gc.get_threshold(), gc.get_freeze_count()
    assert before[1] == 0
    with many_advices():
        assert gc.get_threshold()[0] == YOUNG_OBJECTS and gc.get_freeze_count() > 0
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
    try:
        with many_advices():
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
