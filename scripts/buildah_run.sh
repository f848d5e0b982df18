# as_user: a command as an image's user in a buildah container, sourced by test_images.sh.
#
#   as_user CTR [OPTIONS ...] -- COMMAND...
#
# Runs COMMAND in container CTR (`buildah run --isolation chroot`) as the image's own user,
# with the folder $work shared at /work; the OPTIONS before -- go to buildah run (--env K=V,
# more --volume). Its status is the command's.
#
# buildah itself, before the command starts, now and then fails to seal its memfd copy of
# the runtime ("Close_Fd sealing memfd copy: Device or resource busy"): such a start is
# retried once, and a line is added to $work/retries for the end of the output; a failure
# of the command itself is never retried. tests/units/test_buildah_run.py holds it to that
# with a fake buildah.
as_user() {
  local - # the `set` options below are this function's only
  set +e
  local ctr="$1" user
  shift
  local opts=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  user="$(buildah inspect --format '{{.OCIv1.Config.User}}' "$ctr")" || return
  local err="$work/.buildah-stderr.$BASHPID" status=0 attempt
  for attempt in 1 2; do
    # stderr passes through as it comes (sshd's log is read while it runs) and is copied to
    # $err; stdout goes straight out through fd 3. A pipeline, so that tee has written all
    # of it before $err is read.
    {
      buildah run --isolation chroot --user "$user" --volume "$work:/work" "${opts[@]}" \
        "$ctr" -- "$@" 2>&1 1>&3 3>&- | tee "$err" >&2 3>&-
      status="${PIPESTATUS[0]}"
    } 3>&1
    if [ "$status" = 0 ] || ! grep -q "sealing memfd" "$err" || [ "$attempt" = 2 ]; then
      break
    fi
    echo "buildah run $*: start attempt $attempt failed (sealing memfd)" >>"$work/retries"
  done
  rm -f "$err"
  return "$status"
}
