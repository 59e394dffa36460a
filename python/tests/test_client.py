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

    def __init__(self, path, replies, close_after=None):
        super().__init__(daemon=True)
        self.replies = list(replies)
        self.close_after = close_after
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
            if self.close_after is not None and len(self.requests) >= self.close_after:
                break
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


class CommTimeTest(unittest.TestCase):
    def test_overlapping_intervals_count_once(self):
        from orrery.client import union_length
        self.assertEqual(union_length([]), 0.0)
        # [0, 2] and [1, 3] overlap: 3 s; [5, 6] apart: 1 s; [5.2, 5.4] inside it.
        self.assertAlmostEqual(union_length([(5, 6), (1, 3), (0, 2), (5.2, 5.4)]), 4.0)

    def test_record_comm_refuses_an_interval_that_ends_before_it_starts(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "agent.sock")
            agent = ScriptedAgent(path, [])
            agent.start()
            client = orrery.Client(path, "1")
            with self.assertRaises(ValueError):
                client.record_comm(2.0, 1.0)
            client.close()


class AgentGoneTest(unittest.TestCase):
    def test_an_agent_that_dies_ends_the_job_rather_than_breaking_the_pipe(self):
        # The agent answers one wait, then goes away: the report that follows
        # raises JobEnded, so the loop's checkpoint-and-exit path runs (issue 39).
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "agent.sock")
            agent = ScriptedAgent(path, [
                {"go": True, "delay_ms": 0, "iteration": 1, "epoch": 1, "throttle_gbps": None, "period_ms": 10.0},
            ], close_after=1)
            agent.start()
            client = orrery.Client(path, "1")
            with self.assertRaises(orrery.JobEnded) as cm:
                for _ in range(3):
                    with client.iteration():
                        agent.join(2)  # the agent is gone before the report
            self.assertIn("agent went away", cm.exception.reason)
            self.assertTrue(client.done)
            client.close()


if __name__ == "__main__":
    unittest.main()
