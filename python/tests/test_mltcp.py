"""orrery.mltcp's pacing loop on a simulated link: a chunk runs at what the
link leaves it (its capacity less a competitor's rate), the pacer waits
as it asks. The same properties as the worker's pacer's tests
(crates/orrery-testbed/src/mltcp.rs)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from orrery import mltcp  # noqa: E402

#: The testbed's 500 Mbit/s, bytes per second.
LINK = 62.5e6


class Clock:
    def __init__(self):
        self.t = 0.0

    def now(self):
        return self.t

    def sleep(self, s):
        self.t += s


def on_a_shared_link(pacer, clock, other, chunks, nbytes=mltcp.CHUNK):
    """Runs ``chunks`` chunks while a competitor holds ``other`` bytes/s of
    the link; returns the rate after each (inf: unpaced) and the bytes per
    second the chunks moved, waits included."""
    rates, t0 = [], clock.now()
    for _ in range(chunks):
        pacer.run(nbytes, lambda: clock.sleep(nbytes / (LINK - other)))
        rates.append(float("inf") if pacer.rate is None else pacer.rate)
    return rates, chunks * nbytes / (clock.now() - t0)


def seasoned(clock):
    """A pacer half way through a long iteration (F = 1) that has seen the
    link to itself."""
    p = mltcp.Pacer(iteration_bytes=1000 * mltcp.CHUNK, clock=clock.now, sleep=clock.sleep)
    p.sent = 500 * mltcp.CHUNK
    on_a_shared_link(p, clock, 0.0, 1 + mltcp.WINDOW)  # a burst's first chunk is not measured
    p.sent = 500 * mltcp.CHUNK
    return p


class PacerTest(unittest.TestCase):
    def test_alone_nothing_is_paced_and_nothing_lost(self):
        clock = Clock()
        p = seasoned(clock)
        rates, moved = on_a_shared_link(p, clock, 0.0, 100)
        self.assertTrue(all(r == float("inf") for r in rates), rates)
        self.assertAlmostEqual(p.peak / LINK, 1.0, places=9)
        self.assertEqual(p.waited_s, 0.0)
        self.assertAlmostEqual(moved / LINK, 1.0, places=9)

    def test_shared_it_yields_part_of_its_share_and_takes_the_link_back_when_alone(self):
        clock = Clock()
        p = seasoned(clock)
        share = LINK / 2
        rates, moved = on_a_shared_link(p, clock, share, 200)
        # Over 3 chunks: one at the half (3/4 of the link), unpaced; two
        # (3/5), cut to BETA of that; then a sawtooth: waits between chunks
        # leave the competitor some of its half.
        self.assertEqual(rates[0], float("inf"))
        self.assertAlmostEqual(rates[1], mltcp.BETA * 0.6 * LINK)
        self.assertTrue(all(r < LINK for r in rates[1:]), "paced while shared")
        self.assertGreater(p.waited_s, 0.0)
        # By hand: the rate alternates 0.425 and 0.675 of the link (+ALPHA·8·F
        # per 512-KiB chunk at F = 1); at 0.425 a chunk's turn comes after
        # 1/0.425 of its bytes' time, at 0.675 the link's half sets it:
        # 2 chunks in (1/0.425 + 1/0.5) → 0.459 of the link, 0.919 of the half.
        self.assertAlmostEqual(moved / share, 2 / (1 / 0.85 + 1), delta=0.01)
        # The competitor leaves: unpaced once 2 of the 3 chunks had the link.
        rates, _ = on_a_shared_link(p, clock, 0.0, 5)
        self.assertEqual(rates[1:], [float("inf")] * 4)

    def test_a_burst_after_idle_is_measured_from_its_second_chunk(self):
        # The slow first chunk after compute (TCP's restart after idle) is
        # not counted: alone, nothing is paced.
        clock = Clock()
        p = seasoned(clock)
        for _ in range(5):
            clock.sleep(0.25)  # compute
            p.run(mltcp.CHUNK, lambda: clock.sleep(3 * mltcp.CHUNK / LINK))
            on_a_shared_link(p, clock, 0.0, 10)
            self.assertIsNone(p.rate)
        self.assertEqual(p.waited_s, 0.0)

    def test_the_job_further_into_its_iteration_grows_faster(self):
        # Two pacers cut to the same rate; then one a tenth into its
        # iteration, the other nine tenths: a chunk that got more than it
        # asked raises the second's rate nine times as much (F(r) = 2r).
        clocks = {"early": Clock(), "late": Clock()}
        early, late = seasoned(clocks["early"]), seasoned(clocks["late"])
        for p, done, clock in ((early, 100, clocks["early"]), (late, 900, clocks["late"])):
            on_a_shared_link(p, clock, 0.8 * LINK, mltcp.WINDOW)
            p.sent = done * mltcp.CHUNK
        start = early.rate
        self.assertAlmostEqual(late.rate / start, 1.0, places=9)
        late.rate = start
        self.assertAlmostEqual(start, mltcp.BETA * 0.2 * LINK)
        for p, clock in ((early, clocks["early"]), (late, clocks["late"])):
            on_a_shared_link(p, clock, 0.7 * LINK, 1, nbytes=mltcp.PIECE)
        # r counts the chunk itself: (900 chunks + a piece) over (100 + a piece).
        ratio = (late.rate - start) / (early.rate - start)
        self.assertAlmostEqual(ratio, (900 * 8 + 1) / (100 * 8 + 1), places=6)

    def test_the_rate_stops_at_its_floor(self):
        clock = Clock()
        p = seasoned(clock)
        rates, _ = on_a_shared_link(p, clock, 0.99 * LINK, 20)
        self.assertAlmostEqual(min(rates), mltcp.FLOOR * LINK)
        self.assertTrue(all(r >= mltcp.FLOOR * p.peak for r in rates))

    def test_an_iteration_starts_r_again(self):
        p = mltcp.Pacer(iteration_bytes=4 * mltcp.CHUNK)
        p.ran(mltcp.CHUNK, 0.0, 0.01)
        self.assertEqual(p.progress(), 0.25)
        p.begin_iteration()
        self.assertEqual(p.progress(), 0.0)
        p.begin_iteration(2 * mltcp.CHUNK)
        p.ran(mltcp.CHUNK, 0.02, 0.03)
        self.assertEqual(p.progress(), 0.5)
        self.assertEqual(mltcp.aggressiveness(0.25), 0.5)
        self.assertEqual(mltcp.aggressiveness(3.0), 2.0)


if __name__ == "__main__":
    unittest.main()
