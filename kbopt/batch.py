"""`kbopt advise --facts-jsonl`: one facts document per line in, one advice JSON per line out.

`advise_line` is a pure function of (line, pack): the building block a batch pipeline maps over
its records, in this process or any distributed engine's workers (docs/fleet.md). The stream is
read a line at a time and written a line (or a worker's chunk of lines) at a time, so memory
stays flat however many lines there are.
"""
from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from kbopt.engine.advice.advisor import advise
from kbopt.engine.pack.rule import Pack
from kbopt.errors import KboptError
from kbopt.gctuning import tune_for_many_advices
from kbopt.kb.facts import facts_from_document, parse_document
from kbopt.output import STDOUT, Lines, WrittenTo, terminations_interrupt, written_binary

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event

ERROR_FORMAT = "error"


def advise_line(line: str, pack: Pack, evaluator: str = "reference", name: str = "-:1",
                overrides: tuple[str, ...] = ()) -> tuple[bool, str]:
    """(ok, one JSON line without its newline): the advice (advice/2), or an error record
    {"kbopt": "error", "line": N, "error": "..."} naming the input line."""
    ok, data = _advised(line, pack, evaluator, name, overrides)
    return ok, data.decode()


def _advised(line: str, pack: Pack, evaluator: str, name: str, overrides: tuple[str, ...]) -> tuple[bool, bytes]:
    """advise_line's result as the UTF-8 bytes the output carries (the stream never decodes them)."""
    try:
        facts = facts_from_document(parse_document(line, name), name, overrides)
        record: dict[str, Any] = advise(facts, pack, evaluator).to_dict()
        ok = True
    except KboptError as error:
        record = {"kbopt": ERROR_FORMAT, "line": int(name.rpartition(":")[2]), "error": str(error)}
        ok = False
    return ok, json_line(record)


def json_line(record: dict[str, Any]) -> bytes:
    """One JSON line, UTF-8: what `json.dumps(record, ensure_ascii=False, separators=(",", ":"))`
    writes, by orjson, which encodes a 30 KB advice four to six times faster (a tenth of a
    document's cost). The two differ only in how a float under 1e-4 is spelt (`0.00001` against
    `1e-05`, the same number); a test compares them on every example's advice. What orjson
    refuses (an integer past 64 bits, a key that is not a string, a lone surrogate) goes to the
    standard encoder, a lone surrogate then written as its `\\udXXX` escape (kbopt.output's rule).
    Advice holds no NaN or infinity: facts and derived values are checked finite where they enter."""
    import orjson  # a dependency the batch alone uses: loaded with its first line
    try:
        return orjson.dumps(record)
    except orjson.JSONEncodeError:
        text = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


def advise_stream(lines: Iterable[str], out: Lines, pack: Pack, evaluator: str, source: str,
                  overrides: tuple[str, ...] = (), jobs: int = 1) -> tuple[int, int]:
    """Advise every line (each input line gives exactly one output line, in order, so the two
    zip); returns (lines read, lines that failed). With jobs > 1, chunks of lines are advised by
    that many worker processes; a bounded window of chunks is held, so memory stays flat. The
    lines go out as the UTF-8 bytes they were encoded to: a worker writes its chunk as one block
    to a file of a temporary folder, which joins the output in the kernel where it can, never
    decoded, copied between encodings or written a line at a time."""
    numbered = ((n, raw.rstrip("\r\n")) for n, raw in enumerate(lines, start=1))
    count = failed = 0
    if jobs <= 1:
        for n, raw in numbered:
            ok, data = _advised(raw, pack, evaluator, f"{source}:{n}", overrides)
            count, failed = count + 1, failed + (not ok)
            out.write(data + b"\n")
        return count, failed
    # Each worker gets the checked pack: as it is here through a fork, pickled through a spawn
    # (_start_method says which). A worker writes each chunk's lines to a file of a temporary
    # folder, which this process copies to the output in the kernel (_copy_block): sent back
    # through the pool's pipe, 35 KB a line, they had cost this process a second of CPU per
    # 10,000 lines, taken from the workers.
    try:
        blocks = tempfile.TemporaryDirectory(prefix="kbopt-jsonl-")
    except OSError as error:
        raise KboptError(f"--facts-jsonl with {jobs} workers: cannot make a folder in {tempfile.gettempdir()} for "
                         f"their output: {error.strerror} (set TMPDIR to a writable folder, or give --jobs 1)") from None
    context = multiprocessing.get_context(_start_method())
    stop = context.Event()
    # SIGTERM and SIGHUP stop a batch as Ctrl-C does, with or without -o, and its folder is removed.
    # concurrent.futures' pool, not multiprocessing.Pool: a worker that dies (killed, out of
    # memory, a SIGTERM to the whole process group) breaks it, and every task waiting fails at
    # once, where multiprocessing.Pool waited for the lost task forever, forked a replacement from
    # this process's threads (which hung holding the standard input's lock) and, stopping, waited
    # for the queue lock a killed worker held.
    with terminations_interrupt(), blocks as folder:
        others = set(multiprocessing.active_children())     # a caller's own, never killed here
        pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker,
                                   initargs=((pack, evaluator, source, overrides, folder, stop),))
        try:
            # A window of chunks in flight, collected in order: the workers never wait for the
            # slowest line of a batch, and at most IN_FLIGHT_PER_JOB * jobs chunks are held.
            pending: deque[Future[tuple[int, int, str]]] = deque()
            while True:
                while len(pending) < IN_FLIGHT_PER_JOB * jobs and (chunk := list(itertools.islice(numbered, CHUNK))):
                    pending.append(pool.submit(_advise_chunk, chunk))
                if not pending:
                    pool.shutdown(wait=True)     # the workers take their turn to exit, and do
                    return count, failed
                try:
                    lines_done, lines_failed, block = pending.popleft().result()
                except OSError as error:     # advising reads and writes nothing else: the block's file
                    raise KboptError(f"--facts-jsonl: a worker could not write its lines to {folder}: "
                                     f"{error.strerror or error}") from None
                count, failed = count + lines_done, failed + lines_failed
                _copy_block(block, out)
        except BrokenProcessPool:            # from a task's result, or from submitting one
            stop.set()
            _stop_workers(pool, others)
            raise KboptError(f"--facts-jsonl: a worker process ended abruptly after {count} lines of {source} were "
                             "advised (killed from outside, or out of memory?); run again, with fewer --jobs if "
                             "memory is short") from None
        except BaseException:
            # Stopped midway (Ctrl-C, SIGTERM, a worker's error): the workers skip the chunks
            # left, finish the one at hand and exit. The wait is bounded: what is still running
            # after it is killed, so that this process can exit.
            stop.set()
            _stop_workers(pool, others)
            raise


def _stop_workers(pool: ProcessPoolExecutor, others: set[Any]) -> None:
    """Shut a stopped batch's pool down within STOP_WAIT seconds, then kill what is left of its
    workers: the child processes that are not among `others`, those from before the pool."""
    stopping = threading.Thread(target=pool.shutdown, kwargs={"wait": True, "cancel_futures": True}, daemon=True)
    stopping.start()
    stopping.join(STOP_WAIT)
    if stopping.is_alive():
        for worker in set(multiprocessing.active_children()) - others:
            worker.kill()
        stopping.join(STOP_WAIT)


def _start_method() -> str:
    """How the workers start: forked on Linux where this process runs no other thread (a worker
    then takes its first lines 0.1 s after the pool starts, against 0.4 s for a new interpreter
    that imports kbopt and unpickles the pack); spawned otherwise, as a fork of a process with
    threads (a caller's, a test harness's) can copy a lock held mid-operation and leave the
    worker waiting forever."""
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return "fork"
    return "spawn"


# Lines a worker advises per task: few enough to spread the work evenly (the last task of a batch
# is about a tenth of a second), many enough that handing out tasks and taking their results back
# costs this process little: 1.3 s of CPU for 10,000 lines, against 2.1 s with tasks of 16 lines.
CHUNK = 64
STOP_WAIT = 10.0           # seconds the workers of a stopped batch are given to exit (they take a tenth)
IN_FLIGHT_PER_JOB = 4      # tasks queued per worker, so that none waits while results are written
# what a worker advises with: pack, evaluator, source name, --set overrides, folder for its
# blocks, and the event set when the batch stops midway
Worker = tuple[Pack, str, str, tuple[str, ...], str, "Event"]
_WORKER: Worker | None = None


def _start_worker(worker: Worker) -> None:
    global _WORKER
    _WORKER = worker
    tune_for_many_advices()      # a worker only advises, with the pack it was given
    # Ctrl-C reaches the whole process group: the main process stops the batch (advise_stream),
    # and a worker interrupted mid-task would print its traceback and leave its task undone
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker would keep the handlers that turn SIGTERM and SIGHUP into SystemExit in
    # this process (kbopt.output). A Python handler runs only between bytecodes: a signal landing
    # just before the worker blocks on the task queue is noted and never acted on, and whoever
    # ends the worker with it waits forever (1 run in 20 to 100 of `--facts-jsonl -o` with two
    # workers; a CI run hung so). A worker writes no file that outlives the batch's folder: it
    # dies as the kernel ends it, and the pool, broken, fails what it held.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _advise_chunk(chunk: list[tuple[int, str]]) -> tuple[int, int, str]:
    """(lines, lines that failed, the file in the worker's folder holding their output lines)."""
    assert _WORKER is not None
    pack, evaluator, source, overrides, folder, stop = _WORKER
    if stop.is_set():            # the batch stopped: nothing of this chunk is written
        return 0, 0, ""
    results = [_advised(line, pack, evaluator, f"{source}:{number}", overrides) for number, line in chunk]
    path = os.path.join(folder, f"{chunk[0][0]}.jsonl")      # named after its first line: unique
    with open(path, "wb") as handle:
        handle.write(b"".join(data + b"\n" for _, data in results))
    return len(results), sum(not ok for ok, _ in results), path


def _copy_block(path: str, out: Lines) -> None:
    """Append a worker's block to the output, then remove it."""
    with open(path, "rb") as block:
        size = os.fstat(block.fileno()).st_size
        copied = _copied_in_kernel(block.fileno(), out, size)
        if copied < size:            # the rest, read and written
            block.seek(copied)
            shutil.copyfileobj(block, out)
    os.unlink(path)


def _copied_in_kernel(source: int, out: Lines, size: int) -> int:
    """How many of the `size` bytes from `source` the kernel copied to `out`: copy_file_range
    between two files, sendfile into a pipe; none where `out` has no descriptor (a test's
    capture). Each advances the source's offset by what it copied, so one may take over
    where the other stopped."""
    try:
        target = out.fileno()
    except (AttributeError, OSError, ValueError):
        return 0
    out.flush()                      # what was written through the stream goes first
    copied = 0
    try:
        while copied < size and (sent := os.copy_file_range(source, target, size - copied)):
            copied += sent
        return copied
    except OSError:                  # not two files of one kind (a pipe, a terminal): sendfile
        pass
    try:
        while copied < size and (sent := os.sendfile(target, source, None, size - copied)):
            copied += sent
    except OSError:
        pass
    return copied


def input_lines(path: str) -> Iterator[str]:
    if path == "-":
        yield from sys.stdin
        return
    try:
        handle = open(path, encoding="utf-8", errors="replace")   # noqa: SIM115 (closed below, also on Ctrl-C)
    except OSError as error:
        raise KboptError(f"--facts-jsonl {path}: cannot read it: {error.strerror}") from None
    with handle:
        yield from handle


@contextmanager
def streamed_output(output: str | None) -> Iterator[Lines]:
    """Standard output, or what -o names by kbopt.output.write_output's rules, written line by
    line: a file all or nothing (a temporary file beside it, renamed into place when all went
    well), a FIFO written through. Binary: the lines arrive as UTF-8 bytes."""
    if output is None or output == "-":
        stdout = WrittenTo(sys.stdout.buffer, STDOUT)
        WrittenTo(sys.stdout, STDOUT).flush()   # what was written as text goes first
        yield stdout
        stdout.flush()
        return
    with written_binary(output) as handle:
        yield handle
