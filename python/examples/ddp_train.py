"""A PyTorch DistributedDataParallel training loop that orrery schedules.

Each rank runs under a node agent (``orrery agent --node --exec "python3
python/examples/ddp_train.py"``) or in a Kubernetes pod beside one. The agent
sets the rank, the world, ``MASTER_ADDR``/``MASTER_PORT`` (rank 0's data
address, the job's port) and ``GLOO_SOCKET_IFNAME``; ``orrery.torch_hook``
times every gradient bucket's all-reduce, and every iteration starts when the
agent's schedule says (time-shift, slot, delay).

The model is an MLP (``--layers`` × ``--width``²) on synthetic data, on the
CPU with the gloo backend: its gradient (16 MiB at the defaults) makes the
all-reduce a large part of an iteration over the testbed's shaped links.
``--min-compute-ms`` holds each iteration's compute to at least that long
(the real forward and backward run inside it, a sleep pads the rest before
the forward): a GPU's compute time, steady on a small shared CPU, so that the
measured shape is the one the scheduler plans with.

Preemption: when the job leaves this node (``orrery.JobEnded``: preempted,
cancelled, the agent gone; SIGTERM from the agent, which follows with
SIGKILL after its grace period) or a peer does (gloo raises), rank 0 checkpoints
the state after the last completed step and every rank exits 0; the next
placement resumes from that checkpoint (a shared folder: ``--checkpoint-dir``
or ``ORRERY_CHECKPOINT_DIR``). With ``--log-dir`` every rank appends its
iterations in ``orrery worker``'s CSV format and rank 0 its start and end
events to ``ddp-JOB.jsonl`` (what ``orrery testbed compare --ddp`` reads).
"""

import argparse
import collections
import datetime
import json
import os
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import orrery  # noqa: E402
import orrery.torch_hook  # noqa: E402

LOG_HEADER = "job,rank,epoch,iteration,start_unix_ms,delay_ms,duration_ms,comm_ms,cycle_ms"


def add_run_args(p):
    """The options every example shares: threads, checkpoints, logs, gloo's timeout."""
    p.add_argument("--threads", type=int, default=1, help="torch's CPU threads per rank")
    p.add_argument("--checkpoint-dir", default=os.environ.get("ORRERY_CHECKPOINT_DIR", "orrery-checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=50, help="also checkpoint every N steps (0: only on exit)")
    p.add_argument("--log-dir", default=os.environ.get("ORRERY_LOG_DIR"), help="append iteration rows here")
    p.add_argument("--timeout-s", type=float, default=60.0, help="gloo's timeout for a collective")
    p.add_argument("--pace", choices=["none", "mltcp"], default="none",
                   help="mltcp: all-reduce in chunks paced by MLTCP's principle (orrery.mltcp)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=1024, help="hidden width (default 1024)")
    p.add_argument("--layers", type=int, default=4, help="linear layers (default 4: 16 MiB of gradient)")
    p.add_argument("--batch", type=int, default=16, help="samples per rank per micro-step")
    p.add_argument("--accumulate", type=int, default=1, help="micro-steps per iteration (all but the last under no_sync)")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's gradient bucket size")
    p.add_argument("--min-compute-ms", type=float, default=0.0, help="pad each iteration's compute to at least this")
    add_run_args(p)
    args = p.parse_args(argv)
    for name in ("width", "layers", "batch", "accumulate", "threads"):
        if getattr(args, name) < 1:
            p.error("--%s: expected at least 1, found %d" % (name.replace("_", "-"), getattr(args, name)))
    if args.min_compute_ms < 0 or args.bucket_cap_mb <= 0 or args.timeout_s <= 0:
        p.error("--min-compute-ms must be ≥ 0, --bucket-cap-mb and --timeout-s > 0")
    return args


def env_int(name):
    value = os.environ.get(name)
    if value in (None, ""):
        raise SystemExit("ddp_train.py: %s is not set (the node agent sets it with --exec)" % name)
    try:
        return int(value)
    except ValueError:
        raise SystemExit("ddp_train.py: %s: expected an integer, found %r" % (name, value))


def build_model(torch, args):
    torch.manual_seed(0)
    layers = []
    for k in range(args.layers):
        layers.append(torch.nn.Linear(args.width, args.width))
        if k + 1 < args.layers:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def stop_at_a_safe_point():
    """Installs the SIGTERM handler: it ends the job at once while the loop
    waits for a slot, and after the step while ``term["in_step"]`` is set;
    returns that state."""
    term = {"asked": False, "in_step": False}

    def on_sigterm(signum, frame):
        term["asked"] = True
        if not term["in_step"]:
            raise orrery.JobEnded("stopped by SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)
    return term


def save_checkpoint(torch, path, model, optimizer, step):
    """Writes atomically: a rank killed while saving leaves the last one whole."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    client = orrery.Client.from_env()
    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    job = client.job
    master = "tcp://%s:%s" % (os.environ.get("MASTER_ADDR", "127.0.0.1"), os.environ.get("MASTER_PORT", "29500"))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=master, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    model = build_model(torch, args)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    ckpt_path = os.path.join(args.checkpoint_dir, "job-%s.pt" % job)
    step = 0
    if os.path.exists(ckpt_path):
        state = torch.load(ckpt_path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    hook = orrery.torch_hook.register(ddp, client, pace=args.pace)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    log = events = None
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
        path = os.path.join(args.log_dir, "worker-%s-%d.csv" % (job, rank))
        fresh = not os.path.exists(path)
        log = open(path, "a", buffering=1)
        if fresh:
            log.write(LOG_HEADER + "\n")
        if rank == 0:
            events = open(os.path.join(args.log_dir, "ddp-%s.jsonl" % job), "a", buffering=1)

    def event(**fields):
        if events is not None:
            events.write(json.dumps(dict(fields, epoch=client.epoch, unix_s=time.time())) + "\n")

    # SIGTERM (the agent stopping the job, or dying: PR_SET_PDEATHSIG) ends
    # the job at a safe point: at once while waiting for a slot, after the
    # iteration (step and report) while inside one, so the checkpoint is a
    # whole step the service has counted.
    term = stop_at_a_safe_point()
    event(event="start", step=step, grad_bytes=grad_bytes, world=world, resumed=step > 0)
    # The real compute of the last iterations (not the first: DDP builds its
    # buckets then), whose median sets the padding: steady, so that two jobs
    # started together stay together unless the network parts them.
    real_compute = collections.deque(maxlen=5)
    reason, last_end, first, iterations = "done", time.monotonic(), True, 0
    # Whether the service counted the job's last iteration: the agent then
    # stops its processes, and a SIGTERM that arrives before this loop sees
    # it ends a job that is done, not one that was stopped.
    finished = False
    try:
        while not client.done:
            with client.iteration():
                if first:  # the service's iteration number against the checkpoint's step
                    first = False
                    event(event="first_iteration", step=step, service_iteration=client.iteration_number)
                term["in_step"] = True
                t0 = time.monotonic()
                pad_s = (args.min_compute_ms - (statistics.median(real_compute) if real_compute else 0.0)) / 1e3
                if pad_s > 0:
                    time.sleep(pad_s)  # before the forward: the all-reduce stays at the end
                optimizer.zero_grad()
                generator = torch.Generator().manual_seed(1_000_003 * step + rank)
                for micro in range(args.accumulate):
                    x = torch.randn(args.batch, args.width, generator=generator)
                    if micro + 1 < args.accumulate:
                        with ddp.no_sync():
                            ddp(x).square().mean().backward()
                    else:
                        ddp(x).square().mean().backward()
                optimizer.step()
                step += 1
                duration_ms = (time.monotonic() - t0) * 1e3
            finished = client.done  # the report just made said whether that was the last
            comm_ms = client.last_comm_ms or 0.0
            iterations += 1
            if iterations > 1:
                real_compute.append(max(0.0, duration_ms - comm_ms - max(pad_s, 0.0) * 1e3))
            cycle_ms = (time.monotonic() - last_end) * 1e3
            last_end = time.monotonic()
            if log is not None:
                log.write("%s,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f\n" % (
                    job, rank, client.epoch, client.iteration_number, client.started_unix_s * 1e3,
                    client.delay_ms, duration_ms, comm_ms, cycle_ms))
            if rank == 0 and args.checkpoint_every and step % args.checkpoint_every == 0:
                save_checkpoint(torch, ckpt_path, model, optimizer, step)
            # The step and its report are done, and logged: a SIGTERM that came meanwhile ends it here.
            term["in_step"] = False
            if term["asked"]:
                raise orrery.JobEnded("stopped by SIGTERM")
    except orrery.JobEnded as e:
        reason = "done" if finished else e.reason
    except RuntimeError as e:  # gloo: a peer left mid-collective (it was preempted)
        reason = "a peer left (%s)" % str(e).splitlines()[0]
    term["in_step"] = True  # leaving: a SIGTERM now (the job is over) must not cut the checkpoint short
    if rank == 0:
        # The state after the last completed step: the optimizer steps after
        # the all-reduce, so a collective cut short changed no weight.
        save_checkpoint(torch, ckpt_path, model, optimizer, step)
    paced = {}
    if hook.pace is not None:
        paced = {"chunks": hook.pace.chunks, "paced_s": hook.pace.waited_s, "peak_bytes_s": hook.pace.peak}
        if args.log_dir:  # each chunk's time and the rate after it, for a look at the loop
            with open(os.path.join(args.log_dir, "mltcp-%s-%d.csv" % (job, rank)), "w") as f:
                f.write("began_s,took_s,bytes,rate_bytes_s\n")
                for began, took, nbytes, rate in hook.pace.trace:
                    f.write("%.6f,%.6f,%d,%s\n" % (began, took, nbytes, "" if rate is None else "%.0f" % rate))
    event(event="end", step=step, reason=reason, buckets=hook.buckets, **paced)
    print("job %s rank %d: %s at step %d" % (job, rank, reason, step), flush=True)
    client.close()
    # A peer that left can keep gloo's threads waiting: exit without them.
    os._exit(0)


if __name__ == "__main__":
    main()
