"""The node-agent protocol: JSON lines over a Unix socket (see the Rust
module ``orrery_serve::node_agent``)."""

import contextlib
import json
import os
import socket
import threading
import time


def host_time():
    """This host's wall clock, s: ``time.time()`` moved by
    ``ORRERY_CLOCK_SKEW_MS`` when set (tests of hosts whose clocks differ;
    the agent reads the same variable and converts to the service's clock)."""
    return time.time() + float(os.environ.get("ORRERY_CLOCK_SKEW_MS", "0") or 0) / 1e3


def union_length(intervals):
    """Total length covered by ``(start, end)`` intervals, overlaps once.
    O(n log n) in their number (a sort, then one sweep)."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


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
        #: The delay the agent asked before the current iteration, ms.
        self.delay_ms = 0.0
        #: How long the current iteration waited for its slot, ms: the
        #: agent's hold of the request plus ``delay_ms``.
        self.last_wait_ms = 0.0
        #: When the current (or last) iteration started, host clock, s.
        self.started_unix_s = None
        #: Communication time of the last reported iteration, ms (None: none marked).
        self.last_comm_ms = None
        #: Number of communication intervals marked in the last reported iteration.
        self.last_comm_intervals = 0
        # (start, end) on time.monotonic() of this iteration's communication;
        # DDP's hook adds them from its communication thread, hence the lock.
        self._comm = []
        self._comm_lock = threading.Lock()
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
        # An agent that stopped or died ends the job on this node: the
        # caller's checkpoint-and-exit path (JobEnded) runs, not a bare
        # BrokenPipeError (its next placement starts new processes).
        try:
            self._sock.sendall((json.dumps(request) + "\n").encode("utf-8"))
            line = self._reader.readline()
        except OSError as e:
            self.done = True
            raise JobEnded("the agent went away (%s)" % e) from e
        if not line:
            self.done = True
            raise JobEnded("the agent went away (it closed the connection)")
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
        self.delay_ms = delay_s * 1e3
        if delay_s > 0:
            time.sleep(delay_s)
        waited_s = time.monotonic() - t0
        self.waited_s += waited_s
        self.last_wait_ms = waited_s * 1e3
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
        """Waits for the slot, runs the block, reports its duration and its
        communication time (the union of the intervals marked by ``comm()``,
        ``record_comm()`` or ``orrery.torch_hook``)."""
        self.wait_for_slot()
        with self._comm_lock:
            self._comm = []
        start_unix = self.started_unix_s = host_time()
        t0 = time.monotonic()
        yield self
        duration = time.monotonic() - t0
        with self._comm_lock:
            intervals, self._comm = self._comm, []
        self.last_comm_intervals = len(intervals)
        self.last_comm_ms = union_length(intervals) * 1e3 if intervals else None
        self.report(start_unix, duration, None if self.last_comm_ms is None else self.last_comm_ms / 1e3)

    def record_comm(self, start, end):
        """Marks ``[start, end]`` (``time.monotonic()`` seconds) as
        communication of the current iteration. Thread-safe: a framework's
        communication thread may call it. Overlapping intervals (buckets
        all-reduced while others are in flight) count once."""
        if end < start:
            raise ValueError("record_comm: end %r is before start %r" % (end, start))
        with self._comm_lock:
            self._comm.append((float(start), float(end)))

    @contextlib.contextmanager
    def comm(self):
        """Marks the block as communication of the current iteration."""
        t0 = time.monotonic()
        try:
            yield self
        finally:
            self.record_comm(t0, time.monotonic())

    def finish(self):
        """Tells the scheduler this job ended its work with the current iteration."""
        self.report(host_time(), 0.0, done=True)
