"""MLTCP's principle for collectives whose sockets cannot be paced (gloo,
NCCL): issue 68, item 4.

MLTCP (Rajasekaran et al., arXiv 2402.09589) scales a flow's congestion
window increase by an aggressiveness function F(r) of r, the share of its
job's bytes already sent this iteration: the job further into its
communication takes more of a shared link and finishes first, and
competing jobs slide apart until they interleave. ``orrery worker`` does it
on its own sockets (``crates/orrery-testbed/src/mltcp.rs``); a DDP job's
bytes go through gloo, whose sockets are out of reach. Here the pacing
moves up one level: an all-reduce runs as a sequence of chunks of at most
:data:`CHUNK` bytes, each a collective of its own, and a chunk starts no
earlier than ``len / rate`` after the one before began. The rate follows
the worker's AIMD loop, with a chunk's own time standing in for a blocked
write and the worker's drain rate over its last pieces for the rate over
the burst's last :data:`WINDOW` chunks:

* a burst's first chunk (after the iteration's compute) is not measured:
  TCP restarts its window after an idle period, and gloo's threads wake;
* the rate over the burst's last :data:`WINDOW` chunks is measured; the
  highest seen is the path's own rate (the peak);
* measured at :data:`ALONE` of the peak or more, the chunks had the link
  to themselves: unpaced (alone, nothing is paced and nothing lost);
* under that, and slower than the rate asked (or unpaced), they met a
  competitor: the rate drops to :data:`BETA` of what they got, never under
  :data:`FLOOR` of the peak;
* faster than the rate asked, but not the link's, the rate rises by
  :data:`ALPHA` · F(r) · the peak per 64 KiB (the worker's piece), F(r) = 2r
  as in the worker and the simulator's ``mltcp-reno``.

Both ranks of a job pace their own calls; a collective waits for the
slower, so a job moves at its slower rank's pace. What chunking costs
alone: each chunk is a collective with its own fixed cost (on the
testbed's 2-rank DDP pair a 512-KiB chunk took ~9.8 ms at the median
where its bytes need 8.4 at the link's rate). Pure
Python; the collective is passed in, so the pacing is tested without
torch.
"""

import collections
import time

#: Bytes per chunk: 512 KiB, 8.4 ms at the testbed's 500 Mbit/s, several
#: times a collective's fixed cost (~1.4 ms a chunk measured there).
CHUNK = 512 * 1024
#: The worker's piece: ALPHA is per piece, so a chunk's increase is the
#: same share of the peak as the worker's over the same bytes.
PIECE = 64 * 1024
#: The worker's constants (``orrery_testbed::mltcp``).
ALPHA = 1.0 / 32.0
BETA = 0.85
FLOOR = 1.0 / 16.0
#: Chunks over which the rate is measured.
WINDOW = 3
#: At this share of the peak or more, the link is the job's alone. Lower
#: than the worker's 0.9: alone on the testbed (testbed-ddp, reno), the
#: rate over 3 chunks of gloo's all-reduce ran at 0.58-1.0 of its peak,
#: p10 0.75-0.79, median 0.83-0.87 (two ranks, 149 windows each); a link
#: shared with one other job halves it.
ALONE = 0.65
#: A chunk that begins this long after the one before ended, beyond the
#: wait asked, begins a new burst.
IDLE = 0.005
#: The name that asks for this pacing (``--pace mltcp``).
NAME = "mltcp"


def aggressiveness(r):
    """MLTCP's F(r) for r in [0, 1]: 2r (its mean over an iteration is 1)."""
    return 2.0 * min(1.0, max(0.0, r))


class Pacer:
    """One job's paced rate over its collectives on this rank. Not
    thread-safe: one thread runs a rank's collectives in order."""

    def __init__(self, iteration_bytes=0, clock=time.monotonic, sleep=time.sleep):
        #: Bytes per second; None: unpaced.
        self.rate = None
        #: The highest chunk rate measured, bytes per second.
        self.peak = 0.0
        self.iteration_bytes = iteration_bytes
        self.sent = 0
        #: When the next chunk may begin (the end of the last, or later).
        self._next_at = None
        self._window = collections.deque(maxlen=WINDOW)
        self._clock = clock
        self._sleep = sleep
        #: Chunks run and the time spent waiting before them, seconds.
        self.chunks = 0
        self.waited_s = 0.0
        #: The last chunks: (began, took, bytes, the rate after), seconds and
        #: bytes per second (None: unpaced).
        self.trace = collections.deque(maxlen=4096)

    def begin_iteration(self, nbytes=None):
        """A new iteration (of ``nbytes``, when known): r starts again at 0."""
        if nbytes is not None:
            self.iteration_bytes = nbytes
        self.sent = 0

    def progress(self):
        """r: the share of this iteration's bytes already sent."""
        if self.iteration_bytes <= 0:
            return 1.0
        return min(1.0, self.sent / self.iteration_bytes)

    def ran(self, nbytes, began, ended):
        """A chunk of ``nbytes`` ran from ``began`` to ``ended`` (seconds)."""
        self.sent += nbytes
        took = ended - began
        # Later than its turn by more than IDLE: the first chunk of a burst.
        if self._next_at is None or began - self._next_at > IDLE:
            self._window.clear()
        elif took > 0:
            self._window.append((nbytes, took))
        if len(self._window) == WINDOW:
            got = sum(n for n, _ in self._window) / sum(t for _, t in self._window)
            self.peak = max(self.peak, got)
            if got >= ALONE * self.peak:
                self.rate = None
            elif self.rate is None or got < self.rate:
                self.rate = max(BETA * got, FLOOR * self.peak)
            else:
                rate = self.rate + ALPHA * (nbytes / PIECE) * aggressiveness(self.progress()) * self.peak
                self.rate = rate if rate < self.peak else None
        gap = 0.0 if self.rate is None else nbytes / self.rate
        self._next_at = max(began + gap, ended)
        self.trace.append((began, took, nbytes, self.rate))

    def run(self, nbytes, collective):
        """Waits for the chunk's turn, runs ``collective()`` (one chunk of
        ``nbytes``) and learns from its time."""
        if self._next_at is not None:
            wait = self._next_at - self._clock()
            if wait > 0:
                self.waited_s += wait
                self._sleep(wait)
        began = self._clock()
        collective()
        self.ran(nbytes, began, self._clock())
        self.chunks += 1


def chunk_elements(numel, element_size, chunk_bytes=CHUNK):
    """Elements per chunk: the fewest chunks of at most ``chunk_bytes``,
    all of one size but the last (a remainder under one element per chunk):
    a short last chunk would measure a collective's fixed cost as a slow
    link."""
    chunks = max(1, -(-numel * element_size // chunk_bytes))
    return max(1, -(-numel // chunks))


def paced_all_reduce(dist, tensor, group, pacer, chunk_bytes=CHUNK):
    """All-reduces ``tensor`` (flat or not; contiguous) in place, in chunks
    of at most ``chunk_bytes`` paced by ``pacer``. The same chunks on every
    rank: they depend on the tensor's size only."""
    flat = tensor.view(-1)
    per = chunk_elements(flat.numel(), flat.element_size(), chunk_bytes)
    for start in range(0, flat.numel(), per):
        part = flat[start:start + per]
        pacer.run(part.numel() * part.element_size(), lambda p=part: dist.all_reduce(p, group=group))
