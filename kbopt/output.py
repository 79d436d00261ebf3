"""Writing a result: to standard output, or all-or-nothing to a file (-o)."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Protocol

from kbopt.errors import KboptError
from kbopt.reports.escape import terminal_message, terminal_text


def _new_file_mode(target: Path) -> int:
    try:
        return target.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _utf8(text: str) -> str:
    """The text as valid UTF-8 will carry it: a lone surrogate (from an escaped JSON string, say) is
    written as its \\udXXX escape rather than as bytes no reader can decode, or a failed write."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


@contextlib.contextmanager
def terminations_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise SystemExit within the block, so that what it made is removed (a
    temporary file, a batch's folder; Python's default for them is to die on the spot, leaving it
    behind). SIGKILL cannot be caught."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def write_output(text: str, output: str | None) -> None:
    """Write all or nothing: a temporary file beside the target, renamed into place."""
    text = _utf8(text)
    if output is None or output == "-":
        WrittenTo(sys.stdout, STDOUT).write(text)
        WrittenTo(sys.stdout, STDOUT).flush()
        return
    try:
        _write_file(text, output)
    except (OSError, RuntimeError) as error:      # Path.resolve raises RuntimeError on a symlink loop before 3.13
        raise _cannot_write(output, error) from None


STDOUT = "-"     # what _cannot_write calls standard output


def _cannot_write(output: str, error: OSError | RuntimeError) -> KboptError:
    reason = getattr(error, "strerror", None) or str(error)
    return KboptError(("standard output" if output == STDOUT else f"-o {output}") + f": cannot write there: {reason}")


class Lines(Protocol):
    """Where a stream of bytes is written: what `advise --facts-jsonl` uses of its output."""

    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...

    def fileno(self) -> int: ...


class WrittenTo:
    """An output (standard output, a device, a file) that says where a write failed (a full disk,
    /dev/full) in a one-paragraph message, exit 2, rather than as an OSError from deep inside a
    batch. A reader gone from a pipe stays a BrokenPipeError (main() ends quietly on it)."""

    def __init__(self, handle: IO[Any], output: str):
        self.handle, self.output = handle, output

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise _cannot_write(self.output, error) from None

    def flush(self) -> None:
        try:
            self.handle.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise _cannot_write(self.output, error) from None

    def fileno(self) -> int:
        return self.handle.fileno()


def _write_file(text: str, output: str) -> None:
    target, through = _destination(output)
    if through:
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as error:
            raise KboptError(f"-o {output}: cannot write there: {error.strerror}") from None
        return
    with replaced(target, output) as handle:
        handle.write(text)


def _destination(output: str) -> tuple[Path, bool]:
    """The file `-o output` writes, and whether it is written through rather than replaced: a
    FIFO, device or socket cannot be replaced atomically (and its reader waits on it). Through a
    symlink, the file it points to is replaced and the link kept."""
    if not output:
        raise KboptError("-o: the file name is empty; give a path, or - for standard output")
    target = Path(output)
    if target.is_dir():
        raise KboptError(f"-o {output}: is a directory; give a file name")
    if target.is_symlink():
        target = target.resolve(strict=True)
    return target, target.exists() and not target.is_file()


@contextmanager
def written_binary(output: str) -> Iterator[Lines]:
    """A binary handle on what `-o output` names, by write_output's rules, for output written
    as it is made (`kbopt advise --facts-jsonl`): a file is replaced all or nothing, a FIFO,
    device or socket written through."""
    try:
        target, through = _destination(output)
        handle = open(target, "wb") if through else None   # noqa: SIM115 (closed below)
    except (OSError, RuntimeError) as error:
        raise _cannot_write(output, error) from None
    if handle is None:
        with replaced_binary(target, output) as replacing:
            yield WrittenTo(replacing, output)
        return
    with terminations_interrupt(), handle:
        yield WrittenTo(handle, output)
        WrittenTo(handle, output).flush()     # a device's last bytes fail here, not in close()


@contextmanager
def replaced(target: Path, output: str) -> Iterator[IO[str]]:
    """A text handle (UTF-8) on a temporary file beside `target`, renamed over it when the block
    ends well and removed when it does not (an error, Ctrl-C, SIGTERM or SIGHUP): what is written
    lands whole or not at all."""
    with _replaced(target, output, binary=False) as handle:
        yield handle


@contextmanager
def replaced_binary(target: Path, output: str) -> Iterator[IO[bytes]]:
    """`replaced`, for bytes: `kbopt advise --facts-jsonl -o` streams its UTF-8 lines through it."""
    with _replaced(target, output, binary=True) as handle:
        yield handle


@contextmanager
def _replaced(target: Path, output: str, binary: bool) -> Iterator[IO[Any]]:
    # The temporary name keeps at most 32 characters (128 bytes) of the target's, so that a target name near the
    # file system's 255-byte limit still has a temporary file beside it.
    import tempfile  # here: advice written to the terminal spares a cold start this import (5 ms)
    with terminations_interrupt():
        try:
            fd, temporary = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name[:32]}.")
        except OSError as error:
            raise KboptError(f"-o {output}: cannot write there: {error.strerror}") from None
        try:
            with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as handle:
                yield handle
            os.chmod(temporary, _new_file_mode(target))     # mkstemp makes 0600; honour umask instead
            os.replace(temporary, target)
        except OSError as error:
            Path(temporary).unlink(missing_ok=True)
            raise KboptError(f"-o {output}: cannot write there: {error.strerror}") from None
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def say(message: str, lines: bool = False) -> None:
    """A message on standard error. Messages quote input (a file name, a fact's value, what a
    Prometheus server answered), so each passes the terminal escaper on its way out: one
    paragraph, every control character shown as <U+001B> (a newline too); or, for a rule
    diagnostic, which kbopt lays out in `lines` itself, no line after the first beginning as
    kbopt's own do (`kbopt:`). None can send a control sequence or forge a line."""
    print(terminal_message(message) if lines else terminal_text(message), file=sys.stderr)
