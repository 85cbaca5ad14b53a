#!/usr/bin/env bash
# System tools that runner=netem, runner=slurm and their tests use: iproute2 (namespaces, tc)
# and Slurm with munge. Installs what is missing when run as root on Debian/Ubuntu; otherwise
# says what is missing (the tests that need it are then skipped, each naming the reason).
set -euo pipefail
need=()
command -v tc >/dev/null || need+=(iproute2)
command -v slurmctld >/dev/null || need+=(slurm-wlm)
command -v munged >/dev/null || need+=(munge)
if ((${#need[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "install-system-deps: missing ${need[*]} (needs root and apt-get); those tests will skip" >&2
  exit 0
fi
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; }; then
  echo "install-system-deps: could not install ${need[*]}; those tests will skip" >&2
fi
