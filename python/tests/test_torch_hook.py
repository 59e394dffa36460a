"""orrery.torch_hook inside real DistributedDataParallel: two ranks over gloo
on loopback, each with its own scripted agent. Skips, saying why, where
torch is not installed (CI installs Debian's python3-torch and runs this
file with /usr/bin/python3)."""

import multiprocessing
import os
import socket
import sys
import tempfile
import traceback
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import orrery  # noqa: E402
import orrery.mltcp  # noqa: E402
import orrery.torch_hook  # noqa: E402
from test_client import ScriptedAgent  # noqa: E402

try:
    import torch
    import torch.distributed as dist
except ImportError as e:  # pragma: no cover - depends on the machine
    torch = None
    WHY = "torch is not installed for %s (%s)" % (sys.executable, e)

ITERATIONS = 3
# Three 512×512 layers (1 MiB of fp32 gradient each) in buckets of at most
# 1 MB: DDP makes at least three buckets per iteration once it has rebuilt
# them after the first (which here goes as one).
LAYERS, WIDTH, BUCKET_MB = 3, 512, 1.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def script(iterations):
    replies = []
    for k in range(1, iterations + 1):
        replies.append({"go": True, "delay_ms": 0, "iteration": k, "epoch": 1, "throttle_gbps": None, "period_ms": 50.0})
        replies.append({"ok": True, "done": k == iterations})
    return replies


def model():
    torch.manual_seed(0)  # the same initial weights on every rank
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def rank_main(rank, port, folder, accumulate, results, pace=None):
    """One rank: ITERATIONS iterations of `accumulate` micro-steps (all but
    the last under no_sync), beside a reference DDP model with the default
    hook on the same data; puts what it saw on `results`."""
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=2)
        path = os.path.join(folder, "agent-%d.sock" % rank)
        agent = ScriptedAgent(path, script(ITERATIONS))
        agent.start()
        client = orrery.Client(path, "7", rank=rank, epoch=1)
        hooked = torch.nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=BUCKET_MB)
        reference = torch.nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=BUCKET_MB)
        hook = orrery.torch_hook.register(hooked, client, pace=pace)
        generator = torch.Generator().manual_seed(100 + rank)  # each rank its own data
        buckets, intervals, max_grad_gap = [], [], 0.0
        while not client.done:
            hooked.zero_grad()
            reference.zero_grad()
            before = hook.buckets
            with client.iteration():
                for micro in range(accumulate):
                    x = torch.randn(16, WIDTH, generator=generator)
                    for ddp in (hooked, reference):
                        if micro < accumulate - 1:
                            with ddp.no_sync():
                                ddp(x).square().mean().backward()
                        else:
                            ddp(x).square().mean().backward()
            buckets.append(hook.buckets - before)
            intervals.append(client.last_comm_intervals)
            for a, b in zip(hooked.parameters(), reference.parameters()):
                max_grad_gap = max(max_grad_gap, (a.grad - b.grad).abs().max().item())
        client.close()
        agent.join(5)
        reports = [r for r in agent.requests if r["op"] == "report"]
        results.put((rank, {"buckets": buckets, "intervals": intervals, "gap": max_grad_gap, "reports": reports,
                            "bytes": hook.bytes, "chunks": hook.pace.chunks if hook.pace else 0}))
        dist.destroy_process_group()
    except BaseException:  # noqa: B902 - the parent reports it
        results.put((rank, {"error": traceback.format_exc()}))


@unittest.skipIf(torch is None, "" if torch is not None else WHY)
class TorchHookTest(unittest.TestCase):
    def run_ranks(self, accumulate, pace=None):
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        with tempfile.TemporaryDirectory() as folder:
            port = free_port()
            procs = [ctx.Process(target=rank_main, args=(r, port, folder, accumulate, results, pace)) for r in range(2)]
            for p in procs:
                p.start()
            out = dict(results.get(timeout=120) for _ in procs)
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()
        for rank, r in sorted(out.items()):
            self.assertNotIn("error", r, "rank %d:\n%s" % (rank, r.get("error")))
        return out

    def check(self, out):
        for rank, r in out.items():
            # Every bucket went through the hook, several per iteration.
            self.assertEqual(len(r["buckets"]), ITERATIONS, r)
            self.assertTrue(all(b >= LAYERS for b in r["buckets"][1:]), r["buckets"])
            self.assertEqual(r["intervals"], r["buckets"])
            # All of the gradient, once per iteration: weights and biases.
            grad_bytes = LAYERS * (WIDTH * WIDTH + WIDTH) * 4
            self.assertEqual(r["bytes"], ITERATIONS * grad_bytes)
            # The hook averages as DDP's default does.
            self.assertLess(r["gap"], 1e-6, "rank %d: gradients differ from DDP's own all-reduce" % rank)
            # Each iteration's report carries its communication, inside it.
            self.assertEqual([x["iteration"] for x in r["reports"]], list(range(1, ITERATIONS + 1)))
            for x in r["reports"]:
                self.assertGreater(x["comm_ms"], 0.0, x)
                self.assertLessEqual(x["comm_ms"], x["duration_ms"], x)

    def test_every_bucket_is_timed_and_averaged_as_ddp_does(self):
        self.check(self.run_ranks(accumulate=1))

    def test_gradient_accumulation_communicates_once_per_iteration(self):
        # Four micro-steps, three under no_sync: the same buckets and bytes
        # per iteration as without accumulation, and the same gradients as
        # DDP's own hook accumulating the same way.
        self.check(self.run_ranks(accumulate=4))

    def test_mltcp_pacing_sums_the_same_gradients_in_chunks(self):
        # --pace mltcp: every bucket all-reduced as 512-KiB chunks on the
        # hook's thread, in DDP's order; the gradients as DDP's own.
        out = self.run_ranks(accumulate=1, pace="mltcp")
        self.check(out)
        grad_bytes = LAYERS * (WIDTH * WIDTH + WIDTH) * 4
        for r in out.values():
            # Each bucket (≤ 1 MB) is at least one chunk; the 3 MiB of
            # gradient at least 6 chunks an iteration.
            self.assertGreaterEqual(r["chunks"], ITERATIONS * grad_bytes // orrery.mltcp.CHUNK, r)
            self.assertGreaterEqual(r["chunks"], sum(r["buckets"]), r)


if __name__ == "__main__":
    unittest.main()
