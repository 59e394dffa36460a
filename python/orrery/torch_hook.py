"""An optional PyTorch DDP communication hook that marks the all-reduce as
the iteration's communication phase. torch is imported only when used.

    model = torch.nn.parallel.DistributedDataParallel(model)
    orrery.torch_hook.register(model, client)
"""


def register(ddp_model, client):
    """Registers a hook on ``ddp_model`` that all-reduces gradients as DDP
    does and adds the time of each bucket's all-reduce to the client's
    communication time for the current iteration."""
    import time

    import torch.distributed as dist  # lazily: only where torch is installed

    def hook(state, bucket):
        t0 = time.monotonic()
        tensor = bucket.buffer()
        tensor.div_(dist.get_world_size())
        fut = dist.all_reduce(tensor, async_op=True).get_future()

        def done(f):
            client._comm_ms = (client._comm_ms or 0.0) + (time.monotonic() - t0) * 1e3
            return f.value()[0]

        return fut.then(done)

    ddp_model.register_comm_hook(state=None, hook=hook)
    return hook
