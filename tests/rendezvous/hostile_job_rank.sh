#!/bin/sh
# One rank of the hostile-peer job (examples.cmake): rank 0 also starts the hostile peer against
# this job's MLRUN_RDZV_ENDPOINT; every rank then does real rendezvous work. Usage: TOOL
tool=$1
if [ "$RANK" = 0 ]; then
  "$tool" hostile &
  hostile=$!
fi
"$tool" work-after-hostile || exit 1
if [ "$RANK" = 0 ]; then
  wait "$hostile" || exit 1
fi
