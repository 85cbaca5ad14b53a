"""What ``benchmarks.gpu`` keeps of a run, in one folder beside its section of BENCHMARKS.md
(``benchmarks/results/gpu/`` unless told otherwise): the whole log (``gpu.log``: everything it
and the processes it started printed, written as it comes, so a machine taken back mid-run
leaves what ran), the tests' JUnit XML (``tests.xml``) and every row of every table it
measured (``tables.json``). A GPU machine's time is short: nothing of a run is left only on
its console."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from benchmarks.report import BENCHMARKS_MD

RESULTS = BENCHMARKS_MD.parent / "benchmarks" / "results" / "gpu"
LOG, JUNIT, TABLES = "gpu.log", "tests.xml", "tables.json"
KEPT = (LOG, JUNIT, TABLES)
DRAIN_S = 30.0
"""How long the log waits, once the command is done, for what its children still write."""


@dataclass(frozen=True)
class Table:
    """One table of the command: its part of the section, and the rows it was made of."""

    key: str
    """Its name in ``tables.json``."""
    title: str
    what: str
    """How it was measured, in a sentence."""
    text: str
    """The Markdown table, or a line saying why there is none."""
    rows: Sequence[Any] = ()
    """The dataclasses the table was made of, one per row."""
    notes: Mapping[str, Any] = field(default_factory=dict)
    """What the table states beside its rows (the host's limit, why it was not measured)."""

    def markdown(self) -> str:
        return f"### {self.title}\n\n{self.what}\n\n{self.text}"

    def data(self) -> dict[str, Any]:
        notes = {key: _plain(value) for key, value in self.notes.items()}
        return {
            "title": self.title,
            "what": self.what,
            **notes,
            "rows": list(map(_plain, self.rows)),
        }


def _plain(value: Any) -> Any:
    """A dataclass as JSON's dicts and lists (nested ones too); anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def tables_json(head: Mapping[str, Any], tables: Sequence[Table]) -> str:
    """``head`` (the command, the machine, its seconds) and every table's rows, by key."""
    document = {**head, "tables": {table.key: table.data() for table in tables}}
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def prepared(folder: Path) -> Path:
    """``folder``, made if need be, without what an earlier run kept there (so that a file a
    run does not write, such as the XML of tests it had no time for, is not an older one)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in KEPT:
        (folder / name).unlink(missing_ok=True)
    return folder


def shown(path: Path) -> str:
    """``path`` as the section names it: from the repository root when under it."""
    root = BENCHMARKS_MD.parent
    resolved = path.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved)


@contextmanager
def tee_output(log: Path) -> Iterator[None]:
    """Everything written to this process's stdout and stderr, by Python or not, and by the
    processes it starts (which inherit them), also goes to ``log`` as it comes."""
    sys.stdout.flush()
    sys.stderr.flush()
    with log.open("wb") as file:
        lock = threading.Lock()
        copies = [_Copy(fd, file, lock) for fd in (1, 2)]
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for copy in copies:
                copy.stop()


class _Copy:
    """File descriptor ``fd`` turned into a pipe whose reader writes to the console ``fd`` was
    and to the log."""

    def __init__(self, fd: int, log: BinaryIO, lock: threading.Lock) -> None:
        self.fd = fd
        self.console = os.dup(fd)
        read, write = os.pipe()
        os.dup2(write, fd)
        os.close(write)
        self.thread = threading.Thread(target=self._copy, args=(read, log, lock), daemon=True)
        self.thread.start()

    def _copy(self, read: int, log: BinaryIO, lock: threading.Lock) -> None:
        with (
            os.fdopen(read, "rb", buffering=0) as pipe,
            open(self.console, "wb", closefd=False) as console,
        ):
            while chunk := pipe.read(1 << 16):
                console.write(chunk)
                console.flush()
                with lock:
                    log.write(chunk)
                    log.flush()

    def stop(self) -> None:
        """``fd`` back to the console; the copy ends once every writer of the pipe closed it
        (or after ``DRAIN_S``: a child left behind may hold it)."""
        os.dup2(self.console, self.fd)
        self.thread.join(timeout=DRAIN_S)
        if not self.thread.is_alive():  # else still its console
            os.close(self.console)
