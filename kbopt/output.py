"""Writing a result: to standard output, or all-or-nothing to a file (-o)."""
from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from kbopt.errors import KboptError


def _new_file_mode(target: Path) -> int:
    try:
        return target.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_output(text: str, output: str | None) -> None:
    """Write all or nothing: a temporary file beside the target, renamed into place."""
    if output is None or output == "-":
        sys.stdout.write(text)
        return
    if not output:
        raise KboptError("-o: the file name is empty; give a path, or - for standard output")
    target = Path(output)
    if target.is_dir():
        raise KboptError(f"-o {output}: is a directory; give a file name")
    if target.is_symlink():
        target = target.resolve()           # replace the file the link points to, keep the link
    if target.exists() and not target.is_file():
        # A FIFO, device or socket: write through it, since it cannot be replaced atomically.
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as error:
            raise KboptError(f"-o {output}: cannot write there: {error.strerror}") from None
        return
    with replaced(target, output) as handle:
        handle.write(text)


@contextmanager
def replaced(target: Path, output: str) -> Iterator[IO[str]]:
    """A handle on a temporary file beside `target`, renamed over it when the block ends well
    and removed when it does not (an error, Ctrl-C): what is written lands whole or not at all.
    `kbopt advise --facts-jsonl -o` streams through it line by line."""
    try:
        fd, temporary = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.")
    except OSError as error:
        raise KboptError(f"-o {output}: cannot write there: {error.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
        os.chmod(temporary, _new_file_mode(target))     # mkstemp makes 0600; honour umask instead
        os.replace(temporary, target)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise KboptError(f"-o {output}: cannot write there: {error.strerror}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
