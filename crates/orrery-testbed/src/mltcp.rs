//! MLTCP's principle in user space (issue 68, item 4), for `orrery worker`
//! on a kernel whose congestion control cannot be changed per job.
//!
//! MLTCP (Rajasekaran et al., arXiv 2402.09589) scales a flow's congestion
//! window increase by an aggressiveness function of `r`, the share of its
//! job's bytes already sent this iteration. The job further into its
//! communication takes more of a shared link, finishes first, and the other
//! job's next iteration starts later: competing jobs slide apart until
//! their communication interleaves, with no scheduler. The simulator's
//! `mltcp-reno` does it inside reno (`orrery_sim::transport`).
//!
//! Here the kernel's TCP (reno, cubic or bbr) stays as it is, and the
//! sender holds each connection to a rate of its own when the link is
//! shared, an AIMD loop over that rate whose increase is scaled the same
//! way:
//!
//! * the sender writes in pieces of [`PIECE`] bytes, each no earlier than
//!   `len / rate` after the one before; the socket's send buffer is kept
//!   small ([`SEND_BUFFER`]), so a write blocks soon after TCP falls
//!   behind the rate asked;
//! * the drain rate is measured over the burst's last [`WINDOW`] pieces,
//!   and its highest value while writes blocked is the path's own rate;
//! * a write that blocks while the drain is under [`ALONE`] of the path's
//!   own rate means the link is shared: the rate drops to [`BETA`] of the
//!   drain (multiplicative decrease), never under [`FLOOR`] of the path's
//!   rate, so a job at r = 0 still moves. A write that blocks at the
//!   path's own rate leaves the connection unpaced: alone, nothing is
//!   paced and nothing lost;
//! * a write that does not block raises the rate by [`ALPHA`] · F(r) ·
//!   the path's rate (additive increase, per piece), and a rate back at
//!   the path's own is dropped. F(r) = 2r as in the simulator: its mean
//!   over an iteration is reno's 1; the paper's own F was not at hand.
//!
//! Two jobs on one link then share it as AIMD flows with unequal increases
//! do, in proportion to F (Chiu and Jain), and the one further into its
//! iteration wins more. Gloo's and NCCL's sockets are out of reach: under
//! `--ddp` the scripts get `--pace mltcp` and pace their collectives
//! instead, the same loop with a chunk of an all-reduce for a piece
//! (python/orrery/mltcp.py). What both do on the testbed is in
//! docs/results.md ("MLTCP on real TCP").

use std::time::{Duration, Instant};

/// Bytes per paced write: a millisecond at the testbed's 500 Mbit/s, long
/// against the scheduler's wake-up noise.
pub const PIECE: usize = 64 * 1024;
/// The send buffer asked of the kernel (which doubles it), bytes.
pub const SEND_BUFFER: usize = 128 * 1024;
/// Pieces over which the drain rate is measured.
pub const WINDOW: usize = 4;
/// Additive increase per piece, as a share of the highest drain rate
/// measured, at F(r) = 1.
pub const ALPHA: f64 = 1.0 / 32.0;
/// Multiplicative decrease: the rate after a blocked write, as a share of
/// the drain rate measured.
pub const BETA: f64 = 0.85;
/// The lowest rate, as a share of the highest drain rate measured.
pub const FLOOR: f64 = 1.0 / 16.0;
/// Drained at this share of the highest drain rate measured or more, a
/// connection has the path to itself: it runs unpaced.
pub const ALONE: f64 = 0.9;
/// A write that began this long after the one before ended started a new
/// burst (a ring step after its barrier): the drain window starts again.
const IDLE: Duration = Duration::from_millis(2);

/// The prefix that asks for MLTCP over a kernel congestion control:
/// `mltcp-reno` is reno with the pacer.
pub const PREFIX: &str = "mltcp-";

/// Splits a `--cc` name into the kernel's congestion control and whether
/// the pacer runs over it: `mltcp-reno` → (`reno`, true), `cubic` →
/// (`cubic`, false).
pub fn split_cc(name: &str) -> (&str, bool) {
    match name.strip_prefix(PREFIX) {
        Some(kernel) => (kernel, true),
        None => (name, false),
    }
}

/// MLTCP's aggressiveness function F(r), r ∈ [0, 1].
pub fn aggressiveness(r: f64) -> f64 {
    2.0 * r.clamp(0.0, 1.0)
}

/// One connection's paced rate. Pure: the caller sleeps and writes, and
/// tells it what the write took. O(1) a piece.
#[derive(Debug, Clone, Default)]
pub struct Pacer {
    /// Bytes per second; None: unpaced (TCP alone sets the pace).
    rate: Option<f64>,
    /// The highest drain rate measured while the writes blocked, bytes
    /// per second: the path's own rate.
    peak: f64,
    /// This iteration's bytes on this connection, and those sent so far.
    iteration_bytes: u64,
    sent: u64,
    /// When the next piece may be written.
    next_at: Option<Instant>,
    /// The current burst's last pieces: (bytes, when the write ended).
    window: std::collections::VecDeque<(usize, Instant)>,
}

impl Pacer {
    /// A new iteration of `bytes` on this connection: r starts again at 0.
    pub fn begin_iteration(&mut self, bytes: u64) {
        self.iteration_bytes = bytes;
        self.sent = 0;
    }

    /// The share of this iteration's bytes sent.
    pub fn progress(&self) -> f64 {
        if self.iteration_bytes == 0 { 1.0 } else { (self.sent as f64 / self.iteration_bytes as f64).min(1.0) }
    }

    /// The rate in force, bytes per second (None: unpaced).
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// How long to wait at `now` before writing the next piece.
    pub fn wait(&self, now: Instant) -> Duration {
        self.next_at.map_or(Duration::ZERO, |at| at.saturating_duration_since(now))
    }

    /// The rate the burst's last [`WINDOW`] pieces went out at, bytes per
    /// second (None until the window is full).
    fn drained(&self) -> Option<f64> {
        if self.window.len() <= WINDOW {
            return None;
        }
        let (_, first) = self.window.front()?;
        let (_, last) = self.window.back()?;
        let bytes: usize = self.window.iter().skip(1).map(|&(len, _)| len).sum();
        let secs = last.saturating_duration_since(*first).as_secs_f64();
        (secs > 0.0).then(|| bytes as f64 / secs)
    }

    /// A piece of `len` bytes was written from `began` to `ended` (the
    /// write's own time, after [`Pacer::wait`]).
    pub fn wrote(&mut self, len: usize, began: Instant, ended: Instant) {
        self.sent += len as u64;
        if self.window.back().is_some_and(|&(_, last)| began.saturating_duration_since(last) > IDLE) {
            self.window.clear();
        }
        self.window.push_back((len, ended));
        if self.window.len() > WINDOW + 1 {
            self.window.pop_front();
        }
        let blocked = ended.saturating_duration_since(began).as_secs_f64();
        let interval = self.rate.map_or(0.0, |rate| len as f64 / rate);
        // A write blocks once the send buffer is full: TCP drains slower
        // than the rate asked. Under 100 µs is a system call's own time.
        if blocked > (interval / 2.0).max(100e-6) {
            if let Some(drained) = self.drained() {
                self.peak = self.peak.max(drained);
                self.rate = (drained < ALONE * self.peak).then(|| (BETA * drained).max(FLOOR * self.peak));
            }
        } else if let Some(rate) = self.rate {
            let rate = rate + ALPHA * aggressiveness(self.progress()) * self.peak;
            // Back at the path's own rate: unpaced again.
            self.rate = (rate < self.peak).then_some(rate);
        }
        let gap = self.rate.map_or(Duration::ZERO, |rate| Duration::from_secs_f64(len as f64 / rate));
        // Paced from the write's start; a late write does not earn a burst.
        self.next_at = Some((began + gap).max(ended));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cc_name_says_whether_the_pacer_runs() {
        assert_eq!(split_cc("mltcp-reno"), ("reno", true));
        assert_eq!(split_cc("cubic"), ("cubic", false));
        assert_eq!(aggressiveness(0.25), 0.5);
        assert_eq!(aggressiveness(3.0), 2.0);
    }

    /// A pacer fed by a link of `link` bytes/s shared with a competitor
    /// that holds `other` bytes/s: a write blocks when the pacer asks more
    /// than is left (the send buffer is full), and then takes the piece's
    /// time at what is left. Returns the rate after each piece (infinite:
    /// unpaced).
    fn on_a_shared_link(pacer: &mut Pacer, link: f64, other: f64, pieces: usize) -> Vec<f64> {
        let mut now = Instant::now();
        let mut rates = Vec::new();
        for _ in 0..pieces {
            now += pacer.wait(now);
            let ask = pacer.rate().unwrap_or(f64::INFINITY);
            let left = link - other;
            let took = if ask > left { PIECE as f64 / left } else { 1e-6 };
            let ended = now + Duration::from_secs_f64(took);
            pacer.wrote(PIECE, now, ended);
            now = ended;
            rates.push(pacer.rate().unwrap_or(f64::INFINITY));
        }
        rates
    }

    /// 62.5 MB/s: the testbed's 500 Mbit/s.
    const LINK: f64 = 62.5e6;

    /// A pacer half way through a long iteration (F = 1) that has seen the
    /// link to itself.
    fn seasoned() -> Pacer {
        let mut p = Pacer::default();
        p.begin_iteration(1_000_000 * PIECE as u64);
        p.sent = 500_000 * PIECE as u64;
        on_a_shared_link(&mut p, LINK, 0.0, 20);
        p
    }

    #[test]
    fn alone_a_connection_runs_unpaced_and_shared_it_saws_under_its_share() {
        // Alone, every write blocks at the link's rate, which is the peak:
        // nobody to yield to, no pacing, nothing lost.
        let mut p = seasoned();
        assert!(on_a_shared_link(&mut p, LINK, 0.0, 200).iter().all(|r| r.is_infinite()));
        assert!((p.peak / LINK - 1.0).abs() < 1e-6, "peak {}", p.peak);
        // A competitor takes half: the pacer cuts under the half left and
        // climbs back, a sawtooth whose mean is within 15% of the share.
        let share = LINK / 2.0;
        let rates = on_a_shared_link(&mut p, LINK, share, 400);
        let tail = &rates[100..];
        assert!(tail.iter().all(|r| r.is_finite()), "paced while shared");
        let mean = tail.iter().sum::<f64>() / tail.len() as f64;
        assert!((0.8..1.05).contains(&(mean / share)), "mean {:.3} of the share", mean / share);
        // The competitor leaves: back to unpaced within a few pieces.
        let rates = on_a_shared_link(&mut p, LINK, 0.0, 40);
        assert!(rates[20..].iter().all(|r| r.is_infinite()), "{rates:?}");
    }

    #[test]
    fn the_job_further_into_its_iteration_grows_faster() {
        // Two pacers cut to the same rate by the same competitor; then one
        // a tenth into its iteration, the other nine tenths: after 5
        // unblocked pieces the second has gained nine times as much.
        let (mut early, mut late) = (seasoned(), seasoned());
        for (p, done) in [(&mut early, 100_000u64), (&mut late, 900_000)] {
            on_a_shared_link(p, LINK, LINK / 2.0, 1 + WINDOW);
            p.sent = done * PIECE as u64;
        }
        let start = early.rate().expect("paced");
        assert_eq!(Some(start), late.rate());
        let mut now = Instant::now();
        for _ in 0..5 {
            for p in [&mut early, &mut late] {
                p.wrote(PIECE, now, now + Duration::from_micros(1));
            }
            now += Duration::from_millis(1);
        }
        let gain = |p: &Pacer| p.rate().expect("paced") - start;
        let ratio = gain(&late) / gain(&early);
        assert!((ratio - 9.0).abs() < 0.05, "late/early gain {ratio:.3}");
    }

    #[test]
    fn the_rate_never_falls_below_its_floor_and_paces_the_writes() {
        // A competitor takes 99% of the link: the rate stops at its floor,
        // a sixteenth of the path's own.
        let mut p = seasoned();
        on_a_shared_link(&mut p, LINK, 0.99 * LINK, 1 + WINDOW);
        let rate = p.rate().expect("paced");
        assert!((rate / LINK - FLOOR).abs() < 1e-9, "rate {:.4} of the link", rate / LINK);
        // A write that did not block: the next waits the piece's interval
        // at that rate from the write's start.
        let began = Instant::now();
        p.wrote(PIECE, began, began + Duration::from_micros(1));
        let interval = PIECE as f64 / p.rate().expect("paced");
        let wait = p.wait(began).as_secs_f64();
        assert!((wait - interval).abs() < 1e-6, "waits {wait} s, expected {interval}");
    }
}
