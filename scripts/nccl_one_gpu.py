#!/usr/bin/env python3
"""Does NCCL let two processes use the same GPU as two ranks? Prints its answer.

paci's stages exchange tensors over NCCL only when they sit on different GPUs
of one node (worker/transport/nccl_link.h); two stages on one GPU go through
the host. This asks NCCL directly, with PyTorch's NCCL backend: two processes
on cuda:0 form a 2-rank group, then send, receive and all-reduce 4 MiB.
Run it with the python3 that has torch, on a machine with a GPU; bounded in
time (each rank gives up after --timeout seconds).

    NCCL_DEBUG=WARN python3 scripts/nccl_one_gpu.py
"""
import argparse
import datetime
import os
import socket
import sys


def rank_main(rank, port, timeout, results):
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=timeout),
                                device_id=torch.device("cuda:0"))
        t = torch.full((1 << 20,), float(rank + 1), device="cuda:0")
        if rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        results.put((rank, "ok", "after send/recv and all_reduce: %g (expected 2)" % float(t[0])))
    except Exception as e:  # NCCL's refusal arrives as an exception
        results.put((rank, "error", "%s: %s" % (type(e).__name__, str(e)[:1500])))
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=int, default=60)
    args = parser.parse_args()
    import torch
    import torch.multiprocessing as mp
    if not torch.cuda.is_available():
        print("NCCL verdict: not tried (no CUDA GPU)")
        return 0
    print("torch", torch.__version__, "NCCL", torch.cuda.nccl.version(), "GPU",
          torch.cuda.get_device_name(0), "GPUs", torch.cuda.device_count())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, port, args.timeout, results)) for r in (0, 1)]
    for p in procs:
        p.start()
    answers = {}
    for _ in procs:
        try:
            rank, status, detail = results.get(timeout=args.timeout + 30)
        except Exception:
            break
        answers[rank] = (status, detail)
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    for rank in (0, 1):
        status, detail = answers.get(rank, ("hung", "no answer within the time limit"))
        print("rank %d: %s: %s" % (rank, status, detail))
    ok = all(answers.get(r, ("",))[0] == "ok" for r in (0, 1))
    print("NCCL verdict: two ranks on one GPU %s" % ("work" if ok else "are refused or fail"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
