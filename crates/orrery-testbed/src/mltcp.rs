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
//! sender holds each connection to a rate of its own, an AIMD loop over
//! that rate whose additive increase is scaled the same way:
//!
//! * the sender writes in pieces of [`PIECE`] bytes, each no earlier than
//!   `len / rate` after the one before (the socket's send buffer is kept
//!   small, [`SEND_BUFFER`], so a write blocks soon after TCP falls
//!   behind the rate);
//! * a write that blocked for more than half its piece's interval means
//!   the path drains slower than the rate asked (the link is shared or
//!   full): the rate drops to [`BETA`] times what the blocked write
//!   drained at (multiplicative decrease);
//! * otherwise it grows by [`ALPHA`] · F(r) · the highest drain rate
//!   measured so far (additive increase, per piece), F(r) = 2r as in the
//!   simulator (its mean over an iteration is reno's 1; the paper's own F
//!   was not at hand).
//!
//! Two jobs on one link then share it as AIMD flows with unequal increases
//! do, in proportion to F (Chiu and Jain), and the one ahead in its
//! iteration wins more. The rate never falls below [`FLOOR`] of the
//! highest drain measured, so a job at r = 0 (F = 0) still moves. What it
//! costs a job alone is the AIMD loop's sawtooth under the link's rate
//! (measured in docs/results.md). Gloo's and NCCL's sockets are not paced
//! this way: the DDP runner refuses `mltcp-*`.

use std::time::{Duration, Instant};

/// Bytes per paced write.
pub const PIECE: usize = 16 * 1024;
/// The send buffer asked of the kernel (which doubles it), bytes.
pub const SEND_BUFFER: usize = 64 * 1024;
/// Additive increase per piece, as a share of the highest drain rate
/// measured, at F(r) = 1.
pub const ALPHA: f64 = 1.0 / 64.0;
/// Multiplicative decrease: the rate after a blocked write, as a share of
/// what that write drained at.
pub const BETA: f64 = 0.85;
/// The lowest rate, as a share of the highest drain rate measured.
pub const FLOOR: f64 = 1.0 / 16.0;

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
    /// Bytes per second; None until the first write that blocked (until
    /// then TCP alone sets the pace).
    rate: Option<f64>,
    /// The highest rate a blocked write drained at, bytes per second.
    peak: f64,
    /// This iteration's bytes on this connection, and those sent so far.
    iteration_bytes: u64,
    sent: u64,
    /// When the next piece may be written.
    next_at: Option<Instant>,
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

    /// The rate in force, bytes per second (None: unpaced yet).
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// How long to wait at `now` before writing the next piece.
    pub fn wait(&self, now: Instant) -> Duration {
        self.next_at.map_or(Duration::ZERO, |at| at.saturating_duration_since(now))
    }

    /// A piece of `len` bytes was written from `began` to `ended` (the
    /// write's own time, after [`Pacer::wait`]).
    pub fn wrote(&mut self, len: usize, began: Instant, ended: Instant) {
        self.sent += len as u64;
        let blocked = ended.saturating_duration_since(began).as_secs_f64();
        let interval = self.rate.map_or(0.0, |rate| len as f64 / rate);
        // A write blocks once the send buffer is full: TCP drains slower
        // than the rate asked. Under 50 µs is a system call's own time.
        if blocked > (interval / 2.0).max(50e-6) {
            let drained = len as f64 / blocked;
            self.peak = self.peak.max(drained);
            self.rate = Some((BETA * drained).max(FLOOR * self.peak));
        } else if let Some(rate) = self.rate {
            self.rate = Some(rate + ALPHA * aggressiveness(self.progress()) * self.peak);
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
    /// that holds `other` bytes/s: a write blocks when the two together
    /// ask more than the link (the send buffer fills), and then drains at
    /// the link's rate less the competitor's. Returns the rates over time.
    fn on_a_shared_link(pacer: &mut Pacer, link: f64, other: f64, pieces: usize) -> Vec<f64> {
        let mut now = Instant::now();
        let mut rates = Vec::new();
        for _ in 0..pieces {
            now += pacer.wait(now);
            let ask = pacer.rate().unwrap_or(f64::INFINITY);
            let share = link - other;
            let took = if ask > share { PIECE as f64 / share } else { 1e-6 };
            let ended = now + Duration::from_secs_f64(took);
            pacer.wrote(PIECE, now, ended);
            now = ended;
            rates.push(pacer.rate().unwrap_or(f64::INFINITY));
        }
        rates
    }

    #[test]
    fn alone_the_rate_saws_just_under_the_link() {
        // 62.5 MB/s (the testbed's 500 Mbit/s) and no competitor, half way
        // through an iteration (F = 1): the rate climbs to the link,
        // blocks, drops to 85% of it and climbs again. Its mean over the
        // sawtooth, (0.85 + 1) / 2 of the link, is what pacing costs alone.
        let link = 62.5e6;
        let mut p = Pacer::default();
        p.begin_iteration(100 * PIECE as u64);
        p.sent = 50 * PIECE as u64;
        let rates = on_a_shared_link(&mut p, link, 0.0, 400);
        let tail = &rates[100..];
        let (lo, hi) = tail.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        assert!((lo / link - BETA).abs() < 0.01, "lowest {:.3} of the link", lo / link);
        assert!(hi / link < 1.0 + 2.0 * ALPHA, "highest {:.3} of the link", hi / link);
    }

    #[test]
    fn the_job_further_into_its_iteration_grows_faster() {
        // Two pacers cut to the same rate; one a tenth into its iteration,
        // the other nine tenths: after 20 unblocked pieces the second has
        // gained nine times as much.
        let link = 62.5e6;
        let mut early = Pacer::default();
        let mut late = Pacer::default();
        for (p, done) in [(&mut early, 10u64), (&mut late, 90)] {
            p.begin_iteration(100_000 * PIECE as u64);
            on_a_shared_link(p, link, link / 2.0, 1); // blocked once: rate = 0.85 · link/2
            p.sent = done * 1_000 * PIECE as u64;
        }
        let start = early.rate().expect("paced");
        assert_eq!(Some(start), late.rate());
        let mut now = Instant::now();
        for _ in 0..20 {
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
        let mut p = Pacer::default();
        p.begin_iteration(1_000 * PIECE as u64);
        let t0 = Instant::now();
        // A write that drained at 62.5 MB/s sets the peak.
        p.wrote(PIECE, t0, t0 + Duration::from_secs_f64(PIECE as f64 / 62.5e6));
        // One that drained at a hundredth of it cuts to the floor, 1/16 of the peak.
        let t1 = t0 + Duration::from_millis(1);
        p.wrote(PIECE, t1, t1 + Duration::from_secs_f64(PIECE as f64 / 0.625e6));
        let rate = p.rate().expect("paced");
        assert!((rate / 62.5e6 - FLOOR).abs() < 1e-9, "rate {rate}");
        // The next piece waits its interval at that rate from the write's start.
        let ended = t1 + Duration::from_secs_f64(PIECE as f64 / 0.625e6);
        let interval = PIECE as f64 / rate;
        let wait = p.wait(ended).as_secs_f64();
        let expected = (interval - PIECE as f64 / 0.625e6).max(0.0);
        assert!((wait - expected).abs() < 1e-6, "waits {wait} s, expected {expected}");
    }
}
