# A real PyTorch DDP training (Gloo, CPU, env:// init) with four workers: every rank ends with
# identical parameters (examples/torch_ddp.py checks and prints "ddp ok").
source "$(dirname "$0")/common.sh"

PY=/usr/bin/python3
if ! "$PY" -c 'import torch, torch.distributed' 2>/dev/null; then
  echo "SKIP: $PY cannot import torch (apt-get install python3-torch)"
  exit 77
fi
# The example lives in the source tree; copy it so that its argv carries the marker.
cp "$SRC/examples/torch_ddp.py" "$T/torch_ddp.py"
# Workaround, not mlrun's: with PyTorch 1.13 a rank hangs at exit about one run in two when the
# DDP model outlives destroy_process_group(): freeing its Reducer at main()'s return runs
# ~ProcessGroupGloo with the GIL held, which joins a Gloo thread waiting for the GIL (seen in gdb;
# the same happens under torchrun). Until the example frees the model first, its copy does.
if ! grep -q '^ *del ddp' "$T/torch_ddp.py"; then
  echo "NOTE: examples/torch_ddp.py keeps its DDP model alive at exit; the test's copy frees it"
  sed -i 's/^\( *\)dist.destroy_process_group()/\1del ddp\n\1dist.destroy_process_group()/' "$T/torch_ddp.py"
  grep -q '^ *del ddp' "$T/torch_ddp.py" || fail "could not apply the teardown workaround"
fi
PYTHON=$PY run_mlrun --nproc_per_node=4 "$T/torch_ddp.py" --steps 20
[ "$RC" -eq 0 ] || fail "exit code $RC: $(tail -n 20 "$T/err")"
expect_grep "$T/out" '^\[0\] ddp ok: 4 ranks, 20 steps, loss [0-9.]+, parameter checksum -?[0-9.]+$'
[ "$(grep -c 'ddp ok' "$T/out")" -eq 1 ] || fail "expected one 'ddp ok' line"
assert_no_marker_left 10
echo PASS
