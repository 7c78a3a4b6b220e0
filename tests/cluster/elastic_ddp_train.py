"""A DDP job (Gloo, CPU) that checkpoints every step to a shared file and resumes from it after a
restart. Rank 1 dies once, at step FAIL_AT of the first attempt; the job must still end at
exactly STEPS steps, each step done once after the last checkpoint. Used by elastic_torch_ddp.sh.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

STEPS = int(os.environ.get("STEPS", "12"))
FAIL_AT = int(os.environ.get("FAIL_AT", "5"))
CKPT = os.environ["CKPT"]


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    start = 0
    if os.path.exists(CKPT):
        state = torch.load(CKPT)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    print(f"rank {rank} restart {restart} resumes at step {start} of {STEPS}", flush=True)
    for step in range(start, STEPS):
        if rank == 1 and restart == 0 and step == FAIL_AT:
            print(f"rank {rank} failing on purpose at step {step}", file=sys.stderr, flush=True)
            os._exit(3)
        x = torch.full((2, 4), float(step + 1))
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        dist.barrier()
        if rank == 0:
            tmp = CKPT + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}, tmp)
            os.replace(tmp, CKPT)
            with open(CKPT + ".log", "a") as f:
                f.write(f"{restart} {step}\n")
        dist.barrier()
    if rank == 0:
        print(json.dumps({"final_step": STEPS, "restart": restart, "world": world,
                          "resumed_from": start}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
