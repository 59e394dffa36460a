"""The client against a scripted agent on a real Unix socket."""

import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import orrery  # noqa: E402


class ScriptedAgent(threading.Thread):
    """Answers each request with the next scripted reply and records requests."""

    def __init__(self, path, replies):
        super().__init__(daemon=True)
        self.replies = list(replies)
        self.requests = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(1)

    def run(self):
        conn, _ = self.server.accept()
        reader = conn.makefile("r")
        for line in reader:
            self.requests.append(json.loads(line))
            reply = self.replies.pop(0) if self.replies else {"error": "script ended"}
            conn.sendall((json.dumps(reply) + "\n").encode())
        reader.close()
        conn.close()
        self.server.close()


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "agent.sock")

    def tearDown(self):
        self.dir.cleanup()

    def test_iteration_waits_the_delay_then_reports_its_duration(self):
        agent = ScriptedAgent(self.path, [
            {"go": True, "delay_ms": 120.0, "iteration": 7, "epoch": 2, "throttle_gbps": 12.5, "period_ms": 80.0},
            {"ok": True, "done": False},
        ])
        agent.start()
        env = {"ORRERY_AGENT_SOCKET": self.path, "ORRERY_JOB": "3", "ORRERY_RANK": "1", "ORRERY_EPOCH": "2"}
        client = orrery.Client.from_env(env)
        t0 = time.monotonic()
        with client.iteration():
            waited = time.monotonic() - t0
            with client.comm():
                time.sleep(0.05)
        client.close()
        agent.join(2)
        self.assertGreaterEqual(waited, 0.12)
        self.assertLess(waited, 0.5)
        self.assertEqual(client.throttle_gbps, 12.5)
        wait, report = agent.requests
        self.assertEqual(wait, {"op": "wait", "job": "3", "rank": 1, "epoch": 2})
        self.assertEqual(report["op"], "report")
        self.assertEqual(report["iteration"], 7)
        self.assertEqual(report["epoch"], 2)
        self.assertGreaterEqual(report["duration_ms"], 50.0)
        self.assertGreaterEqual(report["comm_ms"], 50.0)
        self.assertLessEqual(report["comm_ms"], report["duration_ms"])
        self.assertFalse(client.done)

    def test_stop_ends_the_loop(self):
        agent = ScriptedAgent(self.path, [{"stop": "withdrawn (preempted)"}])
        agent.start()
        client = orrery.Client(self.path, "0")
        with self.assertRaises(orrery.JobEnded) as cm:
            with client.iteration():
                self.fail("the block must not run")
        self.assertIn("preempted", cm.exception.reason)
        self.assertTrue(client.done)
        client.close()
        agent.join(2)

    def test_done_from_the_agent_ends_the_loop(self):
        agent = ScriptedAgent(self.path, [
            {"go": True, "delay_ms": 0, "iteration": 1, "epoch": 1, "throttle_gbps": None, "period_ms": 10.0},
            {"ok": True, "done": True},
        ])
        agent.start()
        client = orrery.Client(self.path, "0")
        runs = 0
        while not client.done:
            with client.iteration():
                runs += 1
        self.assertEqual(runs, 1)
        client.close()
        agent.join(2)

    def test_missing_environment_is_named(self):
        with self.assertRaises(orrery.AgentError) as cm:
            orrery.Client.from_env({"ORRERY_JOB": "1"})
        self.assertIn("ORRERY_AGENT_SOCKET", str(cm.exception))

    def test_unreachable_agent_is_an_agent_error(self):
        with self.assertRaises(orrery.AgentError):
            orrery.Client(os.path.join(self.dir.name, "nobody.sock"), "1")


if __name__ == "__main__":
    unittest.main()


class TorchHookTest(unittest.TestCase):
    def test_hook_marks_the_allreduce_as_communication(self):
        try:
            import torch  # noqa: F401
            import torch.distributed as dist
        except ImportError:
            self.skipTest("torch is not installed")
        import orrery.torch_hook
        import tempfile as tf
        store = os.path.join(tf.mkdtemp(), "store")
        dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
        try:
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))

            class Sink:
                _comm_ms = None

            sink = Sink()
            orrery.torch_hook.register(model, sink)
            model(torch.randn(8, 4)).sum().backward()
            self.assertIsNotNone(sink._comm_ms)
            self.assertGreaterEqual(sink._comm_ms, 0.0)
        finally:
            dist.destroy_process_group()
