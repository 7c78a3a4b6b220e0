#!/bin/sh
# One rank of the wrong-token job (examples.cmake): a client with a wrong MLRUN_RDZV_TOKEN must
# be refused with AuthError; then the rank does real work with the right one. Usage: TOOL
tool=$1
MLRUN_RDZV_TOKEN=wrong-token "$tool" expect-auth-error || exit 1
exec "$tool" work
