#!/bin/bash
# A bash workload for transparency tests: pipelines, subshells, traps,
# command substitution, background jobs. Deterministic output.
set -u
trap 'echo "trap EXIT ran"' EXIT
trap 'echo "got USR1"' USR1
seq 1 2000 | awk '{s += $1} END {print "sum", s}'
( cd /tmp && echo "subshell in $(pwd)" )
words=$(printf 'b\na\nc\n' | sort | tr '\n' ' ')
echo "sorted: $words"
for i in 1 2 3; do (echo "bg $i" > /dev/null) & done
wait
kill -USR1 $$
echo "status of false: $(false; echo $?)"
printf 'x%.0s' $(seq 1 50) | wc -c
exit 5
