"""The node-agent protocol: JSON lines over a Unix socket (see the Rust
module ``orrery_serve::node_agent``)."""

import contextlib
import json
import os
import socket
import time


def host_time():
    """This host's wall clock, s: ``time.time()`` moved by
    ``ORRERY_CLOCK_SKEW_MS`` when set (tests of hosts whose clocks differ;
    the agent reads the same variable and converts to the service's clock)."""
    return time.time() + float(os.environ.get("ORRERY_CLOCK_SKEW_MS", "0") or 0) / 1e3


class JobEnded(Exception):
    """The job left this node: finished, preempted or cancelled (``reason``)."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class AgentError(Exception):
    """The agent refused a request or could not be reached."""


class Client:
    """One training process of a job, talking to its node's agent."""

    def __init__(self, socket_path, job, rank=None, epoch=None, timeout_s=None):
        self.socket_path = str(socket_path)
        self.job = str(job)
        self.rank = rank
        self.epoch = epoch
        self.done = False
        #: Iteration number of the current (or last) iteration.
        self.iteration_number = 0
        #: Cap on the job's flows in force, Gbit/s (None: no cap). A loop that
        #: paces its own communication reads it.
        self.throttle_gbps = None
        #: The job's iteration time alone on its placement, ms.
        self.period_ms = None
        #: Seconds waited for slots so far.
        self.waited_s = 0.0
        self._comm_start = None
        self._comm_ms = None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(self.socket_path)
        except OSError as e:
            self._sock.close()
            raise AgentError("cannot reach the orrery agent at %s: %s" % (self.socket_path, e)) from e
        self._reader = self._sock.makefile("r", encoding="utf-8")

    @classmethod
    def from_env(cls, environ=None):
        """A client from the variables the agent sets when it starts a worker
        (``ORRERY_AGENT_SOCKET``, ``ORRERY_JOB``, ``ORRERY_RANK``, ``ORRERY_EPOCH``)."""
        env = os.environ if environ is None else environ
        missing = [k for k in ("ORRERY_AGENT_SOCKET", "ORRERY_JOB") if not env.get(k)]
        if missing:
            raise AgentError("environment variable(s) %s not set (the agent sets them with --exec)" % ", ".join(missing))
        rank = env.get("ORRERY_RANK")
        epoch = env.get("ORRERY_EPOCH")
        return cls(
            env["ORRERY_AGENT_SOCKET"],
            env["ORRERY_JOB"],
            rank=int(rank) if rank not in (None, "") else None,
            epoch=int(epoch) if epoch not in (None, "") else None,
        )

    def close(self):
        with contextlib.suppress(OSError):
            self._reader.close()
            self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, request):
        self._sock.sendall((json.dumps(request) + "\n").encode("utf-8"))
        line = self._reader.readline()
        if not line:
            raise AgentError("the agent closed the connection")
        reply = json.loads(line)
        if "error" in reply:
            raise AgentError(reply["error"])
        return reply

    def wait_for_slot(self):
        """Blocks until the next iteration may start; returns its number.
        Raises JobEnded when the job has left this node."""
        request = {"op": "wait", "job": self.job}
        if self.rank is not None:
            request["rank"] = self.rank
        if self.epoch is not None:
            request["epoch"] = self.epoch
        t0 = time.monotonic()
        reply = self._call(request)
        if "stop" in reply:
            self.done = True
            raise JobEnded(reply["stop"])
        delay_s = max(0.0, float(reply["delay_ms"]) / 1e3)
        if delay_s > 0:
            time.sleep(delay_s)
        self.waited_s += time.monotonic() - t0
        self.epoch = reply["epoch"]
        self.iteration_number = reply["iteration"]
        self.throttle_gbps = reply.get("throttle_gbps")
        self.period_ms = reply.get("period_ms")
        return self.iteration_number

    def report(self, start_unix_s, duration_s, comm_s=None, done=False):
        """Reports the current iteration; returns True when the job has run all its iterations."""
        request = {
            "op": "report",
            "job": self.job,
            "epoch": self.epoch,
            "iteration": self.iteration_number,
            "start_unix_ms": start_unix_s * 1e3,
            "duration_ms": duration_s * 1e3,
            "done": bool(done),
        }
        if comm_s is not None:
            request["comm_ms"] = comm_s * 1e3
        reply = self._call(request)
        self.done = bool(reply.get("done")) or bool(done)
        return self.done

    @contextlib.contextmanager
    def iteration(self):
        """Waits for the slot, runs the block, reports its duration."""
        self.wait_for_slot()
        self._comm_ms = None
        start_unix = host_time()
        t0 = time.monotonic()
        yield self
        duration = time.monotonic() - t0
        self.report(start_unix, duration, None if self._comm_ms is None else self._comm_ms / 1e3)

    @contextlib.contextmanager
    def comm(self):
        """Marks the communication phase of the current iteration."""
        t0 = time.monotonic()
        try:
            yield self
        finally:
            self._comm_ms = (self._comm_ms or 0.0) + (time.monotonic() - t0) * 1e3

    def finish(self):
        """Tells the scheduler this job ended its work with the current iteration."""
        self.report(host_time(), 0.0, done=True)
