#!/usr/bin/env bash
# Prints the `podman run`/`podman build` flags that let containers start on this machine,
# found by trying them on IMAGE (default layerps-base:bookworm); exit 1, with the reasons
# on stderr, when none does. Podman's defaults need none. On a VM whose cgroups are in
# hybrid mode with a controller left on cgroup v2 (crun: "cgroups in hybrid mode not
# supported"), or whose podman may not raise RLIMIT_NOFILE/RLIMIT_NPROC to podman's
# defaults (1048576; "setrlimit ... Operation not permitted"), it takes runc and the
# limits the calling process has.
#
#   deploy/podman-flags.sh [IMAGE]
set -uo pipefail
IMAGE="${1:-layerps-base:bookworm}"
command -v podman >/dev/null || { echo "podman-flags: podman is not installed" >&2; exit 1; }
try() { timeout 120 podman run --rm "$@" "$IMAGE" true 2>&1; }
errors=""
if out=$(try); then exit 0; fi
errors+="podman run: ${out##*Error: }"$'\n'
nofile=$(ulimit -Hn)
for runtime in runc crun; do
  command -v "$runtime" >/dev/null || { errors+="$runtime: not installed"$'\n'; continue; }
  for nproc in 32768 16384 4096; do
    flags=(--runtime "$runtime" --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
    if out=$(try "${flags[@]}"); then
      echo "${flags[*]}"
      exit 0
    fi
    errors+="podman run ${flags[*]}: ${out##*Error: }"$'\n'
  done
done
printf 'podman-flags: no container starts on this machine:\n%s' "$errors" >&2
exit 1
