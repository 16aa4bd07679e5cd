#!/usr/bin/env bash
# Run every example kernel under compute-sanitizer memcheck and racecheck (GPU machine); logs to $1.
set -u
out=${1:-.}
status=0
for ex in examples/0*.py; do
  for tool in memcheck racecheck; do
    log="$out/sanitize_${tool}_$(basename "$ex" .py).log"
    compute-sanitizer --tool "$tool" --error-exitcode 99 --report-api-errors no python3 "$ex" > "$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    echo "$tool $(basename "$ex"): rc=$rc ${summary:-no summary line}"
    [ $rc -ne 0 ] && status=1
  done
done
exit $status
