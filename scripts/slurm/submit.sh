#!/usr/bin/env bash
# Submit a gradsync sweep as one Slurm job array, wait for it, and write its summary.csv.
#
#   scripts/slurm/submit.sh SWEEP_DIR [SBATCH_OPTION...] -- OVERRIDE...
#   scripts/slurm/submit.sh sweeps/a --partition=gpu --cpus-per-task=4 -- \
#       compressor=topk,deft compressor.density=0.001,0.01 trainer.workers=2,4
#
# Exits 0 when every job completed, 1 otherwise (summary.csv names each failure).
set -euo pipefail
if [[ $# -lt 3 ]]; then
  sed -n '2,8p' "$0" >&2
  exit 2
fi
sweep_dir=$(realpath -m "$1")
shift
sbatch_options=()
while [[ $# -gt 0 && $1 != -- ]]; do sbatch_options+=("$1"); shift; done
shift  # the --
mkdir -p "$sweep_dir"
gradsync sweep --list "$@" >"$sweep_dir/jobs.txt"
jobs=$(wc -l <"$sweep_dir/jobs.txt")
for ((i = 0; i < jobs; i++)); do mkdir -p "$sweep_dir/$i"; done  # Slurm opens each log there
job=$(sbatch --parsable --array="0-$((jobs - 1))" "${sbatch_options[@]}" \
  --output="$sweep_dir/%a/slurm.out" \
  --export="ALL,GRADSYNC_JOBS=$sweep_dir/jobs.txt,GRADSYNC_SWEEP_DIR=$sweep_dir" \
  "$(dirname "$(realpath "$0")")/array.sbatch")
job=${job%%;*}  # --parsable prints "id" or "id;cluster"
echo "submitted job array $job ($jobs tasks); waiting" >&2
# Poll the queue (every GRADSYNC_POLL_S seconds, default 10) until no task is left in it; the
# summary below says which tasks failed and why.
while squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep "${GRADSYNC_POLL_S:-10}"; done
exec gradsync sweep --summarize "$sweep_dir"
