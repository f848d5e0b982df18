#!/usr/bin/env bash
# Smoke tests inside the built images (scripts/build_images.sh --local first), each command run
# by `buildah run --isolation chroot` as the image's own user through its own entrypoint:
#
#   scripts/test_images.sh [KIND...]      KIND: beam, trainer, trainer-gpu (default: all)
#
#   beam         writes each data set's sample and preprocesses it (the data and preprocess steps)
#   trainer      single:1 on the Beam image's MNIST examples; sync:2 started by the exact mpirun
#                command and arguments of the MPIJob's launcher, over ssh to the image's own
#                sshd on port 2222 (the operator's hostfile and keys imitated on loopback
#                addresses); async:2 with its parameter server; then evaluate and compare
#   trainer-gpu  built and inspected only: no GPU here to run it on
#
# Prints one line per check and "N passed, N failed" at the end; exits non-zero on a failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(beam trainer trainer-gpu)
py="$root/.venv/bin/python"
[ -x "$py" ] || py=python3
command -v buildah >/dev/null || { echo "test_images: needs buildah (apt-get install buildah)" >&2; exit 2; }

# as_user CTR [OPTIONS ...] -- COMMAND...: a command as the image's user (with its retry).
# shellcheck source=scripts/buildah_run.sh
. "$root/scripts/buildah_run.sh"

image_ref() { PYTHONPATH="$root" "$py" -c "from distrain.base.images import image; print(image('$1'))"; }

work="$(mktemp -d)"
sshd_pid=""
# sshd runs in the chroot but in this host's process space; killing `buildah run` leaves it
# listening on port 2222, so it is stopped by the pid it writes.
stop_sshd() {
  [ -s "$work/sshd.pid" ] && kill "$(cat "$work/sshd.pid")" 2>/dev/null || true
  rm -f "$work/sshd.pid"
  [ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null || true
  [ -n "$sshd_pid" ] && wait "$sshd_pid" 2>/dev/null || true
  sshd_pid=""
}
cleanup() {
  stop_sshd
  if [ -s "$work/containers" ]; then
    while read -r c; do buildah rm "$c" >/dev/null 2>&1 || true; done <"$work/containers"
  fi
  if [ "${DISTRAIN_KEEP_LOGS:-0}" = 1 ]; then echo "test_images: logs kept in $work/logs"; else rm -rf "$work"; fi
}
trap cleanup EXIT
# The images' user (uid 1000) writes here; the host reads it back.
chmod 0777 "$work"

passed=0
failed=0
check() {  # check NAME COMMAND...: runs it, logs to $work/logs, reports a line
  local name="$1" start=$SECONDS log
  shift
  log="$work/logs/${name//[^A-Za-z0-9_.-]/_}.log"
  mkdir -p "$work/logs"
  if "$@" >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "ok    $name ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    echo "FAIL  $name ($((SECONDS - start)) s); its first and last lines:"
    if [ "$(wc -l <"$log")" -gt 50 ]; then
      { head -n 20 "$log"; echo "[...]"; tail -n 30 "$log"; } | sed 's/^/      /'
    else
      sed 's/^/      /' "$log"
    fi
  fi
}

# A working container of an image, with the shared folder at /work.
# Called as ctr="$(container IMAGE)", in a subshell: the id is kept in a file, which
# cleanup reads (an array set there would be lost, and the containers left behind, each
# holding its image and its disk space after the image is rebuilt).
container() {
  local ctr
  ctr="$(buildah from --pull=never "$1")"
  echo "$ctr" >>"$work/containers"
  echo "$ctr"
}

# The image's entrypoint with ARGS, as the image's user.
in_image() {  # in_image CTR [OPTIONS ...] -- ARGS...
  local ctr="$1" entry
  shift
  local opts=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  entry="$(buildah inspect --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$ctr")"
  # shellcheck disable=SC2086
  as_user "$ctr" "${opts[@]}" -- $entry "$@"
}

not_root() { [ "$(as_user "$1" -- id -u)" != 0 ]; }

test_beam() {
  local ctr
  ctr="$(container "$(image_ref beam)")"
  check "beam: runs as a non-root user" not_root "$ctr"
  check "beam: distrain --help" in_image "$ctr" -- --help
  for dataset in mnist dbpedia gutenberg; do
    check "beam: $dataset sample" in_image "$ctr" -- data "$dataset" --sample --output "/work/raw/$dataset"
    check "beam: $dataset preprocess" in_image "$ctr" -- \
      preprocess "$dataset" --data "/work/raw/$dataset" --output "/work/examples/$dataset"
    check "beam: $dataset metadata written" test -s "$work/examples/$dataset/metadata.json"
  done
}

# The MPIJob's launcher command, for a config at PATH, as the launcher would create it.
mpijob_launcher_command() {
  as_user "$1" -- /opt/venv/bin/python -c '
import json, sys
from distrain.k8s.config import KubernetesConfig
from distrain.k8s.objects import build_objects
from distrain.train.config import TrainConfig

cfg = TrainConfig.from_json(open(sys.argv[1]).read())
objects = build_objects(cfg, KubernetesConfig(namespace="smoke"), "smoke", sys.argv[1])
(mpijob,) = [o for o in objects if o["kind"] == "MPIJob"]
spec = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
print(json.dumps(spec["command"] + spec["args"]))
' "$2"
}

write_config() {  # write_config CTR RUN OUTPUT PATH
  as_user "$1" -- /opt/venv/bin/python -c '
import sys
from distrain.train.config import TrainConfig

TrainConfig(data_dir="/work/examples/mnist", output_dir=sys.argv[2], run=sys.argv[1], epochs=1).save(sys.argv[3])
' "$2" "$3" "$4"
}

sync_over_ssh() {
  local ctr="$1" cmd
  # What the MPI Operator mounts at sshAuthMountPath: a key pair, and the public key as
  # authorized_keys; the workers' sshd (the MPIJob's Worker command) uses it as host key.
  as_user "$ctr" -- sh -c 'mkdir -p /work/ssh && rm -f /work/ssh/id_rsa* &&
    ssh-keygen -q -t rsa -b 2048 -N "" -f /work/ssh/id_rsa &&
    cp /work/ssh/id_rsa.pub /work/ssh/authorized_keys && chmod 700 /work/ssh'
  # The operator's hostfile names each worker pod: here two loopback addresses that are not
  # this host's own, so mpirun reaches both over ssh, as it reaches worker pods.
  printf '127.0.0.2 slots=1\n127.0.0.3 slots=1\n' > "$work/hostfile"
  write_config "$ctr" sync:2 /work/out/sync2 /work/out/sync2-config.json
  cmd="$(mpijob_launcher_command "$ctr" /work/out/sync2-config.json)"
  echo "the MPIJob launcher's command: $cmd"
  if (exec 3<>/dev/tcp/127.0.0.2/2222) 2>/dev/null; then
    echo "port 2222 is already taken (an sshd left by another run?): $(ss -ltnp 'sport = 2222' 2>/dev/null | tail -n +2)"
    return 1
  fi
  as_user "$ctr" --volume "$work/ssh:/home/distrain/.ssh" -- \
    /usr/sbin/sshd -De -f /home/distrain/.sshd_config -o PidFile=/work/sshd.pid 2>"$work/sshd.log" &
  sshd_pid=$!
  for _ in $(seq 1 50); do
    (exec 3<>/dev/tcp/127.0.0.2/2222) 2>/dev/null && break
    sleep 0.2
  done
  local args=()
  mapfile -t args < <(echo "$cmd" | "$py" -c 'import json, sys; print("\n".join(json.load(sys.stdin)))')
  # The operator's launcher environment: the hostfile, and ssh retried while pods start.
  # Open MPI 4.1's mpirun has once failed to start its daemons here and crashed (status 139)
  # in a CI run that could not be reproduced in dozens of runs since: one retry, reported at
  # the end of the output so a flake stays visible; a real fault fails both attempts.
  local status attempt
  for attempt in 1 2; do
    as_user "$ctr" --volume "$work/ssh:/home/distrain/.ssh" \
      --env OMPI_MCA_orte_default_hostfile=/work/hostfile \
      --env OMPI_MCA_plm_rsh_args="-o ConnectionAttempts=10" \
      --env OMPI_MCA_orte_keep_fqdn_hostnames=true -- "${args[@]}"
    status=$?
    [ "$status" = 0 ] && break
    echo "sync over ssh: attempt $attempt exited with status $status" | tee -a "$work/retries"
  done
  stop_sshd
  # Both ranks were started over ssh, as on worker pods (not as mpirun's local children).
  echo "sshd: $(grep -c 'Accepted publickey for distrain' "$work/sshd.log") sessions accepted"
  [ "$status" = 0 ] && test -s "$work/out/sync2/history.json" &&
    [ "$(grep -c 'Accepted publickey for distrain' "$work/sshd.log")" -ge 2 ]
}

evaluate_and_compare() {
  as_user "$1" -- /opt/venv/bin/python -c '
import json
from distrain import steps

reports = [steps.evaluate("/work/examples/mnist", f"/work/out/{run}") for run in ("single", "async2")]
reports.append(steps.baseline("/work/examples/mnist"))
comparison = steps.compare(reports, "/work/out/comparison")
rows = {row["name"]: row for row in comparison["rows"]}
print(json.dumps({name: row.get("accuracy") for name, row in rows.items()}))
assert rows["single:1"]["accuracy"] > 0.5, rows
'
  test -s "$work/out/comparison/comparison.html"
}

test_trainer() {
  local ctr
  if [ ! -s "$work/examples/mnist/metadata.json" ]; then
    # The trainer trains on what the Beam image made, as in a pipeline.
    ctr="$(container "$(image_ref beam)")"
    check "beam: mnist sample" in_image "$ctr" -- data mnist --sample --output /work/raw/mnist
    check "beam: mnist preprocess" in_image "$ctr" -- \
      preprocess mnist --data /work/raw/mnist --output /work/examples/mnist
  fi
  ctr="$(container "$(image_ref trainer)")"
  check "trainer: runs as a non-root user" not_root "$ctr"
  check "trainer: Horovod built with MPI and gloo" as_user "$ctr" --env TF_CPP_MIN_LOG_LEVEL=3 -- \
    /opt/venv/bin/python -c 'import horovod.tensorflow as h; assert h.mpi_built() and h.gloo_built()'
  check "trainer: the workers' sshd configuration" as_user "$ctr" -- sh -c \
    'ssh-keygen -q -t rsa -N "" -f /tmp/k && sed "s|/home/distrain/.ssh/id_rsa|/tmp/k|" \
      /home/distrain/.sshd_config > /tmp/c && /usr/sbin/sshd -t -f /tmp/c'
  check "trainer: single:1" in_image "$ctr" -- \
    train --data /work/examples/mnist --run single:1 --epochs 1 --output /work/out/single
  check "trainer: sync:2 by the MPIJob launcher's mpirun, over ssh" sync_over_ssh "$ctr"
  check "trainer: async:2 with its parameter server" in_image "$ctr" -- \
    train --data /work/examples/mnist --run async:2 --epochs 1 --output /work/out/async2
  check "trainer: evaluate and compare" evaluate_and_compare "$ctr"
}

test_trainer_gpu() {
  local ref
  ref="$(image_ref trainer-gpu)"
  check "trainer-gpu: built" buildah inspect --type image "$ref"
  local ctr
  ctr="$(container "$ref")"
  check "trainer-gpu: runs as a non-root user" not_root "$ctr"
  check "trainer-gpu: distrain --help" in_image "$ctr" -- --help
}

for kind in "${kinds[@]}"; do
  case "$kind" in
    beam) test_beam ;;
    trainer) test_trainer ;;
    trainer-gpu) test_trainer_gpu ;;
    *) echo "test_images: unknown kind $kind" >&2; exit 2 ;;
  esac
done
[ -s "$work/retries" ] && sed 's/^/retried: /' "$work/retries"
echo "images: $passed passed, $failed failed"
[ "$failed" = 0 ]
