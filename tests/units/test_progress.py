"""Progress: one updating line in a terminal, plain lines in a log (downloads, Beam, training)."""

import io
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from distrain.base.progress import Progress, interactive
from tests.fakes.download import DIGEST, PAYLOAD, Server


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_when_the_output_is_not_a_terminal():
    log = io.StringIO()
    assert not interactive(log)
    with Progress("download data.bin", total=2_000_000, unit="bytes", stream=log) as bar:
        for _ in range(20):
            bar.update(100_000)
    lines = log.getvalue().splitlines()
    # The start, each tenth, the end: no carriage returns, no escape codes.
    assert lines[0].startswith("download data.bin: 0% (0 B of 2.0 MB)")
    assert len(lines) == 1 + 10 + 1, lines
    assert lines[5].startswith("download data.bin: 50% (1.0 MB of 2.0 MB)")
    assert lines[-1].startswith("download data.bin: 100% (2.0 MB of 2.0 MB)")
    assert lines[-1].endswith("done")
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()


def test_a_job_without_a_total_says_what_it_has_done_so_far():
    log = io.StringIO()
    notes = iter(["", "3 files (0.1 MB) written", "9 files (0.4 MB) written"])
    with Progress("preprocess mnist (Beam)", stream=log, poll=lambda: next(notes, "")) as bar:
        bar.interval = 0  # a line at every note
        time.sleep(2.5)
    text = log.getvalue()
    assert "preprocess mnist (Beam): 0 s" in text
    assert "3 files (0.1 MB) written" in text
    assert text.splitlines()[-1].endswith("done")


def test_an_updating_bar_in_a_terminal(monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("DISTRAIN_PROGRESS", raising=False)
    tty = Terminal()
    assert interactive(tty)
    with Progress("train sync:2", total=5, unit="epochs", stream=tty) as bar:
        bar.print("[sync:2] epoch 1/5  loss 0.3")
        bar.update(completed=1)
    drawn = tty.getvalue()
    assert "\x1b[" in drawn  # cursor movement: one line, redrawn
    assert "train sync:2" in drawn and "[sync:2] epoch 1/5  loss 0.3" in drawn
    assert "5/5" in drawn  # ends full
    monkeypatch.setenv("DISTRAIN_PROGRESS", "plain")
    assert not interactive(tty)


def test_downloads_show_their_progress(tmp_path, capsys):
    from distrain.preprocess.download import RemoteFile, fetch

    server = Server()
    try:
        fetch(RemoteFile(server.url, DIGEST, len(PAYLOAD)), tmp_path)
    finally:
        server.close()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("download data.bin: 0% (0 B of 200.0 KB)")
    assert err[-1].startswith("download data.bin: 100% (200.0 KB of 200.0 KB)")


def _read_terminal(fd: int, proc: subprocess.Popen, timeout: float) -> str:
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_a_training_run_in_a_terminal_draws_its_progress(mnist_examples, tmp_path):
    # The run's own lines go above one line that counts epochs.
    leader, follower = pty.openpty()
    cmd = [sys.executable, "-m", "distrain", "train", "--data", str(mnist_examples)]
    cmd += ["--output", str(tmp_path / "run"), "--run", "single:1", "--epochs", "2"]
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="120")
    env.pop("DISTRAIN_PROGRESS", None)
    proc = subprocess.Popen(cmd, stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    try:
        screen = _read_terminal(leader, proc, timeout=300)
        assert proc.wait(timeout=60) == 0, screen[-3000:]
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    assert "train single:1" in screen and "epochs" in screen
    assert "2/2" in screen
    assert "[single:1] epoch 2/2" in screen
    assert "\x1b[" in screen
