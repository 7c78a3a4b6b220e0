#!/usr/bin/env python3
"""`hostname` on every slot of K Slurm nodes: mlrun (agents through one srun step) vs Open MPI's
mpirun inside the allocation vs the floor, a bare `srun --overlap -N K --ntasks-per-node=1
hostname` (issue 11). Each is run REPS times, interleaved, inside one allocation per K, so the
allocation's own start is not measured. Prints medians side by side (bench/README.md "Slurm").

  python3 bench/slurm_bench.py --mlrun build/mlrun [--mlrun-old OLD/mlrun] [--reps 15] [--nodes 3 8]

--mlrun-old adds a second mlrun binary (e.g. main's, built elsewhere) to the same interleaved
runs, as "mlrun (old)", so that an improvement is measured side by side.

Needs root: it brings up tests/slurm/slurm_cluster.sh with the largest K nodes and takes it down.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "tests", "slurm", "slurm_cluster.sh")


def commands(mlrun, mlrun_old, k):
    out = {
        "srun (floor)": ["srun", "--overlap", "-N", str(k), "--ntasks-per-node=1", "hostname"],
        "mlrun": [mlrun, "--no_python", "hostname"],
    }
    if mlrun_old:
        out["mlrun (old)"] = [mlrun_old, "--no_python", "hostname"]
    out["mpirun"] = ["mpirun", "--allow-run-as-root", "-np", str(k), "--map-by", "node",
                     "hostname"]
    return out


def inner(args):
    """Inside the allocation: every command REPS times, interleaved; JSON of the times."""
    k = int(os.environ["SLURM_JOB_NUM_NODES"])
    times = {name: [] for name in commands(args.mlrun, args.mlrun_old, k)}
    for _ in range(args.reps):
        for name, argv in commands(args.mlrun, args.mlrun_old, k).items():
            start = time.perf_counter()
            out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
            took = time.perf_counter() - start
            lines = out.stdout.decode().split("\n")
            if out.returncode != 0 or len([l for l in lines if l.strip()]) != k:
                sys.exit(f"{name}: exit {out.returncode}, {len(lines)} lines: "
                         f"{out.stdout.decode()}{out.stderr.decode()}")
            times[name].append(took)
    json.dump(times, sys.stdout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mlrun", default=os.path.join(ROOT, "build", "mlrun"))
    p.add_argument("--mlrun-old", default="", help="a second mlrun binary, measured alongside")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--nodes", type=int, nargs="+", default=[3, 8])
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.mlrun = os.path.abspath(args.mlrun)
    if args.mlrun_old:
        args.mlrun_old = os.path.abspath(args.mlrun_old)
    if args.inner:
        return inner(args)
    subprocess.run([CLUSTER, "up", str(max(args.nodes))], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, SLURM_CONF=os.path.join(
        os.environ.get("MLRUN_SLURM_DIR", "/tmp/mlrun-slurm"), "slurm.conf"))
    try:
        print("| nodes | launcher | n | median s | min s | max s | vs srun | vs mpirun |")
        print("|---|---|---|---|---|---|---|---|")
        for k in args.nodes:
            out = subprocess.run(
                ["salloc", "-N", str(k), "-Q", sys.executable, os.path.abspath(__file__),
                 "--inner", "--mlrun", args.mlrun, "--mlrun-old", args.mlrun_old,
                 "--reps", str(args.reps)],
                env=env, stdout=subprocess.PIPE, check=True, timeout=1800)
            times = json.loads(out.stdout)
            med = {name: statistics.median(t) for name, t in times.items()}
            for name, t in times.items():
                print(f"| {k} | {name} | {len(t)} | {med[name]:.4f} | {min(t):.4f} | "
                      f"{max(t):.4f} | {med[name] / med['srun (floor)']:.2f}x | "
                      f"{med[name] / med['mpirun']:.2f}x |")
    finally:
        subprocess.run([CLUSTER, "down"], stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
