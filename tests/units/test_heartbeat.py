"""Heartbeats tell a process that stopped running from one that waits (issue 37, point 6)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from distrain.train import heartbeat

CHILD = (
    "import sys, time\n"
    "from distrain.train import heartbeat\n"
    "heartbeat.start(sys.argv[1], sys.argv[2], every=0.1)\n"
    "print('beating', flush=True)\n"
    "time.sleep(60)\n"
)


def _beating(tmp_path, who):
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), who], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "beating"
    return proc


def test_a_stopped_process_is_stalled_and_a_waiting_one_is_not(tmp_path):
    stopped, waiting = _beating(tmp_path, "rank 1"), _beating(tmp_path, "rank 0")
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        time.sleep(1.5)
        found = heartbeat.stalled(tmp_path, limit=1.0)
        assert [(s.pid, s.who, s.state) for s in found] == [(stopped.pid, "rank 1", "stopped")]
        assert "rank 1 (pid" in found[0].describe() and "stopped" in found[0].describe()
        # Going on again, it beats again.
        os.kill(stopped.pid, signal.SIGCONT)
        time.sleep(0.5)
        assert heartbeat.stalled(tmp_path, limit=1.0) == []
    finally:
        for proc in (stopped, waiting):
            proc.kill()
            proc.wait()
    # Processes that ended are not stalled: their end is the launcher's other business.
    assert heartbeat.stalled(tmp_path, limit=0.0) == []


def test_no_heartbeats_no_stalls(tmp_path):
    assert heartbeat.stalled(tmp_path, limit=0.0) == []
