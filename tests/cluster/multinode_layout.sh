#!/usr/bin/env bash
# One command launches on every host of a hostfile (each dialect) or -H list, with -np,
# --include/--exclude and --nproc_per_node: the exact rank layout (RANK, LOCAL_RANK, WORLD_SIZE,
# GROUP_RANK, LOCAL_WORLD_SIZE, GROUP_WORLD_SIZE, hostname) from every worker, nodes numbered in
# hostfile order, and nothing of the job left afterwards.
#
#   multinode_layout.sh CASE     (one ctest entry per CASE; see the case list below)
source "$(dirname "$0")/multinode_lib.sh"
CASE=${1:?usage: multinode_layout.sh CASE}

write_worker layout.sh "$LAYOUT_LINE"
hf=$T/hostfile

# launch ARGS...: runs the layout worker with ARGS; every worker must succeed.
launch() {
  run_mlrun "$@" "$T/layout.sh"
  expect_rc 0
}

case $CASE in
  openmpi)
    # Open MPI: slots= and max_slots=, spaces around '=', user@host, comments, a host repeated
    # on several lines (its slots add up, at its first position).
    cat >"$hf" <<'EOF'
# Open MPI hostfile
host3 slots=2 max_slots=4   # comment after the host
root@host1 slots = 1
host2 max-slots=2 slots=1
host2
EOF
    launch --hostfile "$hf"
    check_layout host3:2 host1:1 host2:2
    ;;
  mpich)
    # MPICH (Hydra): host:N, and a bare host with one slot; the file's order, not the names'.
    printf 'host2:2\nhost1\nhost3:3\n' >"$hf"
    launch --hostfile "$hf"
    check_layout host2:2 host1:1 host3:3
    ;;
  deepspeed)
    printf '# DeepSpeed\nhost1 slots=2\nhost2 slots=2\nhost3 slots=2\n' >"$hf"
    launch --hostfile "$hf"
    check_layout host1:2 host2:2 host3:2
    ;;
  plain)
    # One host per line, one slot each; addresses and names mixed.
    printf 'host3\n%s\nhost2\n' "$NET.11" >"$hf"
    launch --hostfile "$hf"
    check_layout host3:1 host1:1 host2:1
    ;;
  slurm)
    # Slurm ranges in a file, and in -H.
    printf 'host[1-3] slots=2\n' >"$hf"
    launch --hostfile "$hf"
    check_layout host1:2 host2:2 host3:2
    rm -f "$T"/rank.*
    launch -H 'host[2-3]:1,host1:2'
    check_layout host2:1 host3:1 host1:2
    ;;
  user_at)
    # user@host in every form: plain, MPICH's :N, an address, username= as a key.
    printf 'root@host1:2\nroot@%s slots=1\nhost3 username=root slots=2\n' "$NET.12" >"$hf"
    launch --hostfile "$hf"
    check_layout host1:2 host2:1 host3:2
    ;;
  hosts)
    # -H as the issue writes it, and with user@ and an address.
    launch -H host1:2,host2:2,host3:1
    check_layout host1:2 host2:2 host3:1
    rm -f "$T"/rank.*
    launch --hosts root@$NET.13:1,host1:1
    check_layout host3:1 host1:1
    ;;
  np)
    # -np fills host by host, as mpirun does; a host left with nothing is not used.
    launch -H host1:2,host2:2,host3:2 -np 3
    check_layout host1:2 host2:1
    rm -f "$T"/rank.*
    printf 'host3 slots=2\nhost2 slots=2\nhost1 slots=2\n' >"$hf"
    launch --hostfile "$hf" -np 6
    check_layout host3:2 host2:2 host1:2
    ;;
  include)
    # DeepSpeed's --include: whole hosts and chosen slots; hostfile order is kept.
    printf 'host1 slots=2\nhost2 slots=2\nhost3 slots=2\n' >"$hf"
    launch --hostfile "$hf" --include 'host3:1@host1'
    check_layout host1:2 host3:1
    ;;
  exclude)
    printf 'host1 slots=2\nhost2 slots=2\nhost3 slots=2\n' >"$hf"
    launch --hostfile "$hf" --exclude 'host2@host3:0'
    check_layout host1:2 host3:1
    ;;
  nproc_per_node)
    # --nproc_per_node overrides every host's slots (given or not).
    printf 'host1 slots=4\nhost2\nhost3:3\n' >"$hf"
    launch --hostfile "$hf" --nproc_per_node=2
    check_layout host1:2 host2:2 host3:2
    rm -f "$T"/rank.*
    launch -H host2:1,host3:1 --nproc_per_node 3
    check_layout host2:3 host3:3
    ;;
  *) fail "unknown case '$CASE'" ;;
esac
expect_no_grep "$T/err" 'error|warning'
assert_no_job_left 15
echo "ok: $CASE: every rank where it belongs"
