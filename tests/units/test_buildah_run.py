"""The image tests' ``as_user`` (scripts/buildah_run.sh), run against a fake ``buildah``.

Its rule: a start that buildah itself fails with "sealing memfd" is retried once and noted
in ``$work/retries``; any other failure is the command's and is returned as it is; stdout
and stderr pass through.
"""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The fake buildah: `inspect` names the image's user; `run` takes the next outcome from
# the file $PLAN (one per line: ok, memfd, fail), logs its arguments and acts it out.
FAKE = r"""#!/usr/bin/env bash
set -eu
if [ "$1" = inspect ]; then echo distrain; exit 0; fi
echo "$*" >> "$CALLS"
outcome="$(head -n 1 "$PLAN")"; sed -i 1d "$PLAN"
case "$outcome" in
  ok) echo "out of the command"; echo "log of the command" >&2; exit 0 ;;
  memfd)
    # buildah's own failure comes late on stderr, as when the runtime cannot start.
    sleep 0.2
    echo 'Error: Close_Fd sealing memfd copy: Device or resource busy' >&2; exit 1 ;;
  fail) echo "the command failed" >&2; exit 3 ;;
esac
"""


def as_user(tmp_path: Path, plan: list[str]) -> tuple[subprocess.CompletedProcess, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "buildah").write_text(FAKE)
    (bin_dir / "buildah").chmod(0o755)
    (tmp_path / "plan").write_text("".join(f"{p}\n" for p in plan))
    work = tmp_path / "work"
    work.mkdir()
    script = (
        "set -euo pipefail\n"
        f"work={work}\n"
        f". {ROOT / 'scripts' / 'buildah_run.sh'}\n"
        "status=0; as_user CTR --env A=1 -- echo hi || status=$?\n"
        "echo status=$status\n"
    )
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PLAN": str(tmp_path / "plan"),
        "CALLS": str(tmp_path / "calls"),
    }
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    return done, work


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def test_a_start_buildah_fails_to_seal_its_memfd_is_retried_once_and_noted(tmp_path):
    done, work = as_user(tmp_path, ["memfd", "ok"])
    assert done.stdout.splitlines() == ["out of the command", "status=0"]
    assert "sealing memfd" in done.stderr and "log of the command" in done.stderr
    assert len(calls(tmp_path)) == 2
    assert calls(tmp_path)[0] == (
        f"run --isolation chroot --user distrain --volume {work}:/work --env A=1 CTR -- echo hi"
    )
    assert (work / "retries").read_text() == (
        "buildah run echo hi: start attempt 1 failed (sealing memfd)\n"
    )
    assert not list(work.glob(".buildah-stderr.*"))


def test_the_command_failing_is_not_retried_and_its_status_is_returned(tmp_path):
    done, work = as_user(tmp_path, ["fail", "ok"])
    assert done.stdout.splitlines() == ["status=3"]
    assert "the command failed" in done.stderr
    assert len(calls(tmp_path)) == 1
    assert not (work / "retries").exists()


@pytest.mark.parametrize("plan", [["memfd", "memfd", "ok"], ["memfd", "fail", "ok"]])
def test_a_second_failure_ends_it(tmp_path, plan):
    done, work = as_user(tmp_path, plan)
    assert done.stdout.splitlines()[-1] == f"status={1 if plan[1] == 'memfd' else 3}"
    assert len(calls(tmp_path)) == 2
    assert len((work / "retries").read_text().splitlines()) == 1


def test_a_start_that_works_runs_once(tmp_path):
    done, work = as_user(tmp_path, ["ok", "ok"])
    assert done.stdout.splitlines() == ["out of the command", "status=0"]
    assert done.stderr == "log of the command\n"
    assert len(calls(tmp_path)) == 1
    assert not (work / "retries").exists()
