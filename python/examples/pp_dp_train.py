"""A pipeline-parallel × data-parallel training loop that orrery schedules.

Each rank runs under a node agent (``orrery agent --node --exec "python3
python/examples/pp_dp_train.py --pp 2"``), as ``ddp_train.py`` does. Ranks
are numbered as Megatron-LM numbers them (data-parallel first, then
pipeline): rank ``r`` is replica ``r % dp`` of stage ``r // dp``, so a
pipeline's stages are ``dp`` ranks apart and a stage's replicas adjacent
(orrery's groups ``{stride dp, size pp}`` and ``{stride 1, size dp}``).

One iteration, on every rank (Narayanan et al., SC'21, §2.2; Megatron-LM's
``forward_backward_pipelining_without_interleaving``):

1. 1F1B over ``--microbatches`` micro-batches: stage ``s`` runs ``pp − s − 1``
   forwards first, then alternates one forward and one backward, then drains
   its backwards. Activations go to the next stage and their gradients back
   with gloo's point-to-point ``isend``/``irecv`` (a forward's send paired
   with the backward's receive, as Megatron pairs them).
2. The stage's gradient all-reduced among its ``dp`` replicas (one flat
   buffer, gloo), timed; that is the communication the rank reports to
   orrery, and the phase CASSINI's shift interleaves.
3. The optimiser's step.

Compute is held to ``--forward-ms`` and ``--backward-ms`` per micro-batch
(the real matmuls run, a sleep pads them): a GPU's compute, steady on a small
shared CPU. With ``--log-dir`` every rank appends its iterations in
``orrery worker``'s CSV format and its phases (compute, time blocked on the
pipeline's sends and receives, the all-reduce) to ``phases-JOB-RANK.csv``;
rank 0 writes ``ddp-JOB.jsonl`` (start and end events: the mesh and its
bytes), which ``orrery testbed compare --ddp`` reads.

Preemption and resumption as in ``ddp_train.py``: replica 0 of each stage
checkpoints the stage.
"""

import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import orrery  # noqa: E402
import orrery.mltcp  # noqa: E402
from ddp_train import LOG_HEADER, add_run_args, env_int, save_checkpoint, stop_at_a_safe_point  # noqa: E402

PHASES_HEADER = "job,rank,stage,replica,iteration,compute_ms,p2p_ms,dp_ms,duration_ms"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pp", type=int, default=2, help="pipeline stages (the world must be a multiple)")
    p.add_argument("--microbatches", type=int, default=8, help="micro-batches per iteration (1F1B)")
    p.add_argument("--width", type=int, default=1024, help="hidden width (default 1024)")
    p.add_argument("--layers", type=int, default=2, help="linear layers per stage (default 2: 8 MiB of gradient)")
    p.add_argument("--batch", type=int, default=4, help="samples per micro-batch (activations: batch × width × 4 B)")
    p.add_argument("--forward-ms", type=float, default=30.0, help="a micro-batch's forward on one stage, at least")
    p.add_argument("--backward-ms", type=float, default=60.0, help="a micro-batch's backward on one stage, at least")
    add_run_args(p)
    args = p.parse_args(argv)
    for name in ("pp", "microbatches", "width", "layers", "batch", "threads"):
        if getattr(args, name) < 1:
            p.error("--%s: expected at least 1, found %d" % (name.replace("_", "-"), getattr(args, name)))
    if args.forward_ms < 0 or args.backward_ms < 0 or args.timeout_s <= 0:
        p.error("--forward-ms and --backward-ms must be ≥ 0, --timeout-s > 0")
    return args


def held(seconds, fn, *a):
    """Runs ``fn(*a)`` and sleeps what is left of ``seconds``; returns its value."""
    t0 = time.monotonic()
    value = fn(*a)
    rest = seconds - (time.monotonic() - t0)
    if rest > 0:
        time.sleep(rest)
    return value


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    client = orrery.Client.from_env()
    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    if world % args.pp:
        raise SystemExit("pp_dp_train.py: WORLD_SIZE %d is not a multiple of --pp %d" % (world, args.pp))
    pp, dp, m = args.pp, world // args.pp, args.microbatches
    stage, replica = rank // dp, rank % dp
    prev_rank = rank - dp if stage > 0 else None
    next_rank = rank + dp if stage + 1 < pp else None
    job = client.job
    master = "tcp://%s:%s" % (os.environ.get("MASTER_ADDR", "127.0.0.1"), os.environ.get("MASTER_PORT", "29500"))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=master, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    # Every rank creates every stage's group, in the same order (gloo's rule).
    dp_groups = [dist.new_group([s * dp + d for d in range(dp)]) for s in range(pp)]
    dp_group = dp_groups[stage]

    torch.manual_seed(stage)
    layers = []
    for k in range(args.layers):
        layers.append(torch.nn.Linear(args.width, args.width))
        if k + 1 < args.layers or stage + 1 < pp:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    params = list(model.parameters())
    grad_bytes = sum(p.numel() * p.element_size() for p in params)
    # --pace mltcp: the stage's data-parallel all-reduce in paced chunks.
    pacer = orrery.mltcp.Pacer(iteration_bytes=grad_bytes) if args.pace == orrery.mltcp.NAME else None
    activation_bytes = args.batch * args.width * 4
    ckpt_path = os.path.join(args.checkpoint_dir, "job-%s-stage-%d.pt" % (job, stage))
    step = 0
    if os.path.exists(ckpt_path):
        state = torch.load(ckpt_path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])

    log = phases = events = None
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)

        def appender(name, header):
            path = os.path.join(args.log_dir, name)
            fresh = not os.path.exists(path)
            f = open(path, "a", buffering=1)
            if fresh:
                f.write(header + "\n")
            return f

        log = appender("worker-%s-%d.csv" % (job, rank), LOG_HEADER)
        phases = appender("phases-%s-%d.csv" % (job, rank), PHASES_HEADER)
        if rank == 0:
            events = open(os.path.join(args.log_dir, "ddp-%s.jsonl" % job), "a", buffering=1)

    def event(**fields):
        if events is not None:
            events.write(json.dumps(dict(fields, epoch=client.epoch, unix_s=time.time())) + "\n")

    # Time blocked on the pipeline's sends and receives this iteration.
    blocked = [0.0]

    def exchange(send=None, to=None, recv_from=None):
        """Sends ``send`` to ``to`` and receives an activation-sized tensor
        from ``recv_from`` together (either may be None); returns it."""
        t0 = time.monotonic()
        works, got = [], None
        if send is not None and to is not None:
            works.append(dist.isend(send.contiguous(), to))
        if recv_from is not None:
            got = torch.empty(args.batch, args.width)
            works.append(dist.irecv(got, recv_from))
        for w in works:
            w.wait()
        blocked[0] += time.monotonic() - t0
        return got

    def one_iteration(seed):
        generator = torch.Generator().manual_seed(seed)
        inputs, outputs = [], []
        compute = [0.0]

        def forward(x):
            t0 = time.monotonic()
            if x is None:  # the first stage draws its micro-batch
                x = torch.randn(args.batch, args.width, generator=generator)
            x = x.detach().requires_grad_(stage > 0)
            y = held(args.forward_ms / 1e3, model, x)
            inputs.append(x)
            outputs.append(y)
            compute[0] += time.monotonic() - t0
            return y

        def backward(grad):
            t0 = time.monotonic()
            x, y = inputs.pop(0), outputs.pop(0)

            def run():
                if grad is None:  # the last stage: its loss
                    (y.square().mean() / m).backward()
                else:
                    y.backward(grad)
                return x.grad if stage > 0 else None

            dx = held(args.backward_ms / 1e3, run)
            compute[0] += time.monotonic() - t0
            return dx

        warmup = min(pp - stage - 1, m)
        for _ in range(warmup):
            y = forward(exchange(recv_from=prev_rank))
            exchange(send=y.detach(), to=next_rank)
        x = exchange(recv_from=prev_rank) if m > warmup else None
        for i in range(m - warmup):
            y = forward(x)
            grad = exchange(send=y.detach(), to=next_rank, recv_from=next_rank)
            dx = backward(grad)
            last = i == m - warmup - 1
            x = exchange(send=dx, to=prev_rank, recv_from=None if last else prev_rank)
        for _ in range(warmup):
            dx = backward(exchange(recv_from=next_rank))
            exchange(send=dx, to=prev_rank)
        return compute[0]

    term = stop_at_a_safe_point()
    event(event="start", step=step, grad_bytes=grad_bytes, world=world, resumed=step > 0, pp=pp, dp=dp,
          microbatches=m, activation_bytes=activation_bytes, forward_ms=args.forward_ms,
          backward_ms=args.backward_ms)
    reason, last_end, finished = "done", time.monotonic(), False
    try:
        while not client.done:
            with client.iteration():
                term["in_step"] = True
                t0 = time.monotonic()
                blocked[0] = 0.0
                optimizer.zero_grad()
                compute_s = one_iteration(1_000_003 * step + replica)
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                with client.comm():
                    a0 = time.monotonic()
                    if dp > 1 and pacer is not None:
                        pacer.begin_iteration()
                        orrery.mltcp.paced_all_reduce(dist, flat, dp_group, pacer)
                    elif dp > 1:
                        dist.all_reduce(flat, group=dp_group)
                    dp_s = time.monotonic() - a0
                flat.div_(dp)
                offset = 0
                for p in params:
                    p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
                optimizer.step()
                step += 1
                duration_ms = (time.monotonic() - t0) * 1e3
            finished = client.done
            cycle_ms = (time.monotonic() - last_end) * 1e3
            last_end = time.monotonic()
            if log is not None:
                log.write("%s,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f\n" % (
                    job, rank, client.epoch, client.iteration_number, client.started_unix_s * 1e3,
                    client.delay_ms, duration_ms, dp_s * 1e3, cycle_ms))
                phases.write("%s,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.3f\n" % (
                    job, rank, stage, replica, client.iteration_number, compute_s * 1e3, blocked[0] * 1e3,
                    dp_s * 1e3, duration_ms))
            if replica == 0 and args.checkpoint_every and step % args.checkpoint_every == 0:
                save_checkpoint(torch, ckpt_path, model, optimizer, step)
            term["in_step"] = False
            if term["asked"]:
                raise orrery.JobEnded("stopped by SIGTERM")
    except orrery.JobEnded as e:
        reason = "done" if finished else e.reason
    except RuntimeError as e:  # gloo: a peer left mid-exchange (it was preempted)
        reason = "a peer left (%s)" % str(e).splitlines()[0]
    term["in_step"] = True
    if replica == 0:
        save_checkpoint(torch, ckpt_path, model, optimizer, step)
    event(event="end", step=step, reason=reason)
    print("job %s rank %d (stage %d, replica %d): %s at step %d" % (job, rank, stage, replica, reason, step),
          flush=True)
    client.close()
    os._exit(0)


if __name__ == "__main__":
    main()
