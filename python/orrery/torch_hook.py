"""A PyTorch DDP communication hook that reports each iteration's all-reduce
to orrery. torch is imported only when it is used.

    model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    hook = orrery.torch_hook.register(model, client)
    while not client.done:
        with client.iteration():        # starts when the agent's schedule says
            loss_fn(model(x), y).backward()
            optimizer.step()

The hook all-reduces each gradient bucket as DDP's default hook does (the sum
over ranks divided by the world size) and marks the interval from the bucket
being ready to its all-reduce completing with ``client.record_comm``; the
client reports the union of those intervals as the iteration's
communication time (buckets in flight together count once). Under
``model.no_sync()`` (gradient accumulation) DDP calls no hook, so the
iteration's communication is the synchronising micro-step's alone.

With ``register(..., pace="mltcp")`` each bucket is all-reduced in paced
chunks by MLTCP's principle (:mod:`orrery.mltcp`), on a thread of the
hook's own that runs the buckets in DDP's order; the gradients are the
same sums.
"""

import queue
import threading
import time


class CommHook:
    """The state of one DDP model's hook: counters a caller can read."""

    def __init__(self, client, process_group=None, pace=None):
        self.client = client
        self.process_group = process_group
        #: An :class:`orrery.mltcp.Pacer`, or None: one all-reduce a bucket.
        self.pace = pace
        self._paced = None
        #: Buckets all-reduced so far, over all iterations.
        self.buckets = 0
        #: Bytes all-reduced so far (each bucket's gradient buffer).
        self.bytes = 0
        self._lock = threading.Lock()

    def allreduce(self, bucket):
        """All-reduces one bucket, timed; returns DDP's future."""
        import torch.distributed as dist  # lazily: only where torch is installed

        group = self.process_group if self.process_group is not None else dist.group.WORLD
        start = time.monotonic()
        tensor = bucket.buffer()
        with self._lock:
            self.buckets += 1
            self.bytes += tensor.numel() * tensor.element_size()
        tensor.div_(dist.get_world_size(group))
        client = self.client
        if self.pace is not None:
            return self._paced_allreduce(dist, group, tensor, bucket.is_last(), start)
        fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()

        def done(f):
            # Runs on the process group's thread when the all-reduce is over.
            client.record_comm(start, time.monotonic())
            return f.value()[0]

        return fut.then(done)

    def _paced_allreduce(self, dist, group, tensor, last, start):
        """Queues the bucket for the pacing thread; returns a future DDP
        waits on. The last bucket of an iteration ends the pacer's r."""
        import torch  # lazily, as above

        from orrery.mltcp import paced_all_reduce

        fut = torch.futures.Future()
        if self._paced is None:
            self._paced = queue.Queue()

            def work(jobs):
                while True:
                    tensor, last, start, fut = jobs.get()
                    try:
                        paced_all_reduce(dist, tensor, group, self.pace)
                    except BaseException as e:  # noqa: B902 - DDP raises it from the future
                        fut.set_exception(e)
                        continue
                    if last:
                        self.pace.begin_iteration()
                    self.client.record_comm(start, time.monotonic())
                    fut.set_result(tensor)

            threading.Thread(target=work, args=(self._paced,), daemon=True, name="orrery-mltcp").start()
        self._paced.put((tensor, last, start, fut))
        return fut


def register(ddp_model, client, process_group=None, pace=None):
    """Registers the hook on ``ddp_model`` (a DistributedDataParallel);
    returns its :class:`CommHook`. ``process_group``: the group DDP
    all-reduces over (default: the world). ``pace``: ``"mltcp"`` paces the
    all-reduces by MLTCP's principle (:mod:`orrery.mltcp`), None or
    ``"none"`` does not."""
    if pace not in (None, "none", "mltcp"):
        raise ValueError("pace: expected none or mltcp, found %r" % (pace,))
    pacer = None
    if pace == "mltcp":
        from orrery.mltcp import Pacer

        grads = [p for p in ddp_model.parameters() if p.requires_grad]
        pacer = Pacer(iteration_bytes=sum(p.numel() * p.element_size() for p in grads))
    hook = CommHook(client, process_group, pacer)
    ddp_model.register_comm_hook(state=hook, hook=timed_allreduce)
    return hook


def timed_allreduce(state, bucket):
    """DDP's hook function (DDP passes the :class:`CommHook` as ``state``)."""
    return state.allreduce(bucket)
