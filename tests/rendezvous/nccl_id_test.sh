#!/bin/sh
# Four ranks through mlrun fetch the NCCL unique ID of "world"; every rank must print the same
# 128 bytes. Exit 77 (skipped) where libnccl.so.2 cannot be loaded. Usage: MLRUN NCCL_UNIQUE_ID
mlrun=$1 program=$2
"$program" --check || exit 77
out=$(timeout 120 "$mlrun" --nproc_per_node=4 --no_python "$program") || {
  echo "nccl_id_test: the job failed" >&2
  exit 1
}
echo "$out"
ids=$(echo "$out" | sed -n 's/.*nccl_unique_id: rank [0-3] of 4: \([0-9a-f]\{256\}\)$/\1/p')
count=$(echo "$ids" | grep -c .)
distinct=$(echo "$ids" | sort -u | grep -c .)
[ "$count" = 4 ] || { echo "nccl_id_test: $count ranks printed an ID, not 4" >&2; exit 1; }
[ "$distinct" = 1 ] || { echo "nccl_id_test: $distinct different IDs" >&2; exit 1; }
echo "$ids" | head -n 1 | grep -q '^0*$' && { echo "nccl_id_test: the ID is all zeros" >&2; exit 1; }
echo "nccl_id_test: 4 ranks, one ID"
