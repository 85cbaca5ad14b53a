"""The launcher's forwarding of worker output: lines go to the log, bar redraws do not."""

from __future__ import annotations

import logging
import os

from runners.local import _Forwarder, _Terminal


def _forward(chunks: list[bytes], caplog, capsys) -> tuple[list[str], str]:
    read_end, write_end = os.pipe()
    terminal = _Terminal()
    with os.fdopen(read_end, "rb") as stream, caplog.at_level(logging.INFO, "gradsync.workers"):
        forwarder = _Forwarder(3, stream, terminal)
        forwarder.start()
        for chunk in chunks:  # separate writes, as a worker flushes them
            os.write(write_end, chunk)
        os.close(write_end)
        forwarder.join(timeout=10)
    return [r.getMessage() for r in caplog.records], capsys.readouterr().err


def test_lines_are_prefixed_with_the_rank(caplog, capsys):
    lines, _ = _forward([b"hello\nwor", b"ld\n", b"no newline at the end"], caplog, capsys)
    assert lines == ["[rank 3] hello", "[rank 3] world", "[rank 3] no newline at the end"]


def test_progress_bar_redraws_reach_the_terminal_but_not_the_log(caplog, capsys):
    chunks = [b"before\n", b"\r 10%|#", b"\r 50%|#####", b"\r100%|##########", b"\n", b"after\n"]
    lines, terminal = _forward(chunks, caplog, capsys)
    assert lines == ["[rank 3] before", "[rank 3] after"]
    assert "[rank 3]  50%|#####" in terminal and "[rank 3] 100%|##########" in terminal
    assert all("%|" not in line for line in lines)


def test_utf8_split_across_reads_is_kept_whole(caplog, capsys):
    text = "résumé ✓\n".encode()
    lines, _ = _forward([text[:2], text[2:9], text[9:]], caplog, capsys)
    assert lines == ["[rank 3] résumé ✓"]
