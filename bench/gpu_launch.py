#!/usr/bin/env python3
"""mlrun and torchrun of the same PyTorch side by side on a GPU machine (a device session).

Interleaved round by round, wall seconds from spawn to exit, medians:
  1. N workers of /bin/true (N = the machine's CPUs), torchrun with --monitor_interval=0.1
     (its best case) and with its default;
  2. examples/torch_ddp.py --backend nccl, one rank a GPU: start to "ddp ok" and exit, mlrun
     serving PyTorch's store (--store mlrun) against torchrun's agent store.

    python3 bench/gpu_launch.py --mlrun .devrt/bin/mlrun [--reps 5]

Standard library only. The python that runs this must have PyTorch (it is torchrun's).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def timed(argv, env, timeout):
    t = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    return time.perf_counter() - t, p.returncode, p.stdout.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlrun", required=True)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    py = sys.executable
    env = dict(os.environ, PYTHON=py)
    torchrun = [py, "-m", "torch.distributed.run"]
    import torch
    gpus = torch.cuda.device_count()
    n = str(os.cpu_count())
    # Debian's torch 1.13 under Python 3.11 crashes in to_map without these (bench/README.md).
    fix = ["--redirects", "1", "--tee", "1"] if torch.__version__.startswith("1.") else []
    ddp = [os.path.join(root, "examples", "torch_ddp.py"), "--backend", "nccl"]
    cases = [
        ("%s x /bin/true" % n, [
            ("mlrun", [args.mlrun, "--nproc_per_node", n, "--no_python", "/bin/true"]),
            ("torchrun --monitor_interval=0.1", torchrun + [
                "--nproc_per_node", n, "--monitor_interval", "0.1", "--no_python"] + fix + ["/bin/true"]),
            ("torchrun (default monitor)", torchrun + [
                "--nproc_per_node", n, "--no_python"] + fix + ["/bin/true"]),
        ]),
        ("torch_ddp.py nccl, %d rank(s)" % gpus, [
            ("mlrun", [args.mlrun, "--nproc_per_node", "gpu"] + ddp),
            ("torchrun --monitor_interval=0.1", torchrun + [
                "--nproc_per_node", "gpu", "--monitor_interval", "0.1"] + fix + ddp),
        ]),
    ]
    print("# %s CPUs, %d GPU(s), torch %s, python %s" % (n, gpus, torch.__version__, py))
    for title, tools in cases:
        samples = {name: [] for name, _ in tools}
        for _ in range(args.reps + 1):  # the first round warms caches and is not counted
            for name, argv in tools:
                s, rc, out = timed(argv, env, 300)
                if rc != 0:
                    print("FAIL: %s exited %d:\n%s" % (" ".join(argv), rc, out[-3000:]))
                    return 1
                samples[name].append(s)
        base = statistics.median(samples["mlrun"][1:])
        print("\n## %s, %d reps\n" % (title, args.reps))
        print("| launcher | median s | min s | max s | vs mlrun |")
        print("|---|---|---|---|---|")
        for name, _ in tools:
            xs = samples[name][1:]
            m = statistics.median(xs)
            print("| %s | %.3f | %.3f | %.3f | %.2fx |" % (name, m, min(xs), max(xs), m / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
