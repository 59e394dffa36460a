//! Host clocks against the service's: each node agent estimates the offset
//! of its host's wall clock from the service's with NTP's four timestamps
//! (RFC 5905 §8), one exchange per heartbeat, and times slots and reports on
//! the service's clock. Hosts' clocks are not assumed equal: a slot computed
//! on a clock 50 ms off lands 50 ms off.
//!
//! For one exchange, the agent sends at t0 (its clock), the service receives
//! at t1 and answers at t2 (its clock), and the agent receives at t3:
//! offset θ = ((t1 − t0) + (t2 − t3)) / 2 and round trip δ = (t3 − t0) −
//! (t2 − t1). θ is exact when the two legs take equally long; its error is
//! at most δ/2. Of the last [`SAMPLES`] exchanges the estimate keeps the one
//! with the smallest δ (NTP's clock filter), the least disturbed by queues.
//!
//! Tests and the testbed move a host's clock with `ORRERY_CLOCK_SKEW_MS`
//! ([`host_unix_us`]), which the agent and the workers it starts read alike;
//! `orrery bench chaos` jumps it under running processes with
//! `ORRERY_CLOCK_SKEW_FILE`.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

/// Exchanges the filter keeps.
pub const SAMPLES: usize = 8;

/// The environment variable that moves this host's clock (ms, may be
/// negative): for tests of unequal clocks.
pub const SKEW_VAR: &str = "ORRERY_CLOCK_SKEW_MS";

/// The wall clock, µs since the Unix epoch.
pub fn unix_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// The environment variable naming a file that holds a further skew of
/// this host's clock (ms), read again at most every [`SKEW_FILE_EVERY`]:
/// a clock that jumps while processes run (`orrery bench chaos`; CLOCK_REALTIME
/// has no namespace). A missing or unreadable file is no skew.
pub const SKEW_FILE_VAR: &str = "ORRERY_CLOCK_SKEW_FILE";

/// How stale [`SKEW_FILE_VAR`]'s skew may be.
pub const SKEW_FILE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// A skew in ms, as text, in µs (0 if it is not a finite number).
fn skew_text_us(text: &str) -> i64 {
    text.trim().parse::<f64>().ok().filter(|ms| ms.is_finite()).map_or(0, |ms| (ms * 1e3) as i64)
}

/// This host's clock, µs since the Unix epoch: the wall clock plus
/// `ORRERY_CLOCK_SKEW_MS` when set (read once), plus the skew in the file
/// `ORRERY_CLOCK_SKEW_FILE` names when set (read at most every 100 ms).
pub fn host_unix_us() -> i64 {
    use std::sync::{Mutex, OnceLock};
    use std::time::Instant;
    static SKEW_US: OnceLock<i64> = OnceLock::new();
    static FILE: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    static FROM_FILE: Mutex<Option<(Instant, i64)>> = Mutex::new(None);
    let skew = *SKEW_US.get_or_init(|| std::env::var(SKEW_VAR).map_or(0, |v| skew_text_us(&v)));
    let from_file = match FILE.get_or_init(|| std::env::var_os(SKEW_FILE_VAR).map(Into::into)) {
        None => 0,
        Some(path) => {
            let mut cached = FROM_FILE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match *cached {
                Some((at, us)) if at.elapsed() < SKEW_FILE_EVERY => us,
                _ => {
                    let us = std::fs::read_to_string(path).map_or(0, |t| skew_text_us(&t));
                    *cached = Some((Instant::now(), us));
                    us
                }
            }
        }
    };
    unix_us() + skew + from_file
}

/// One exchange's timestamps, µs: sent (host), received and answered
/// (service), received (host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    /// t0: the request left the host.
    pub sent: i64,
    /// t1: the service received it.
    pub server_received: i64,
    /// t2: the service answered.
    pub server_sent: i64,
    /// t3: the answer reached the host.
    pub received: i64,
}

impl Exchange {
    /// θ: the service's clock minus the host's, µs.
    pub fn offset_us(&self) -> i64 {
        ((self.server_received - self.sent) + (self.server_sent - self.received)) / 2
    }

    /// δ: the round trip without the service's time, µs.
    pub fn round_trip_us(&self) -> i64 {
        (self.received - self.sent) - (self.server_sent - self.server_received)
    }
}

/// The offset of this host's clock from the service's.
#[derive(Debug, Clone, Default)]
pub struct ClockOffset {
    recent: VecDeque<Exchange>,
}

impl ClockOffset {
    /// Records an exchange; one that went backwards (δ < 0, a clock stepped
    /// meanwhile) is dropped. O(1).
    pub fn record(&mut self, e: Exchange) {
        if e.round_trip_us() < 0 || e.received < e.sent {
            return;
        }
        if self.recent.len() == SAMPLES {
            self.recent.pop_front();
        }
        self.recent.push_back(e);
    }

    /// The best exchange's offset, µs (service minus host), and its error
    /// bound δ/2; None before the first exchange. O(SAMPLES).
    pub fn estimate(&self) -> Option<(i64, i64)> {
        self.recent.iter().min_by_key(|e| e.round_trip_us()).map(|e| (e.offset_us(), e.round_trip_us() / 2))
    }

    /// The offset to add to this host's clock to read the service's, µs (0
    /// before the first exchange).
    pub fn offset_us(&self) -> i64 {
        self.estimate().map_or(0, |e| e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::{ClockOffset, Exchange};

    /// An exchange with a host clock `skew` µs ahead of the service's, legs
    /// of `up` and `down` µs and `busy` µs in the service.
    fn exchange(at: i64, skew: i64, up: i64, busy: i64, down: i64) -> Exchange {
        Exchange {
            sent: at + skew,
            server_received: at + up,
            server_sent: at + up + busy,
            received: at + up + busy + down + skew,
        }
    }

    #[test]
    fn a_skew_is_read_in_ms_and_nonsense_is_none() {
        assert_eq!(super::skew_text_us("60000\n"), 60_000_000);
        assert_eq!(super::skew_text_us(" -1.5 "), -1_500);
        for bad in ["", "NaN", "inf", "a minute"] {
            assert_eq!(super::skew_text_us(bad), 0, "{bad:?}");
        }
    }

    #[test]
    fn equal_legs_give_the_exact_offset() {
        // The host runs 50 ms ahead: the service's clock is the host's − 50 ms.
        let e = exchange(1_000_000, 50_000, 300, 200, 300);
        assert_eq!(e.offset_us(), -50_000);
        assert_eq!(e.round_trip_us(), 600);
    }

    #[test]
    fn the_least_queued_exchange_wins() {
        // Three exchanges with a 2 ms queue on the way up (θ off by 1 ms),
        // one without: the filter keeps the one with the smallest δ.
        let mut c = ClockOffset::default();
        assert_eq!(c.offset_us(), 0);
        for i in 0..3 {
            c.record(exchange(i * 1_000_000, -50_000, 2_300, 100, 300));
        }
        c.record(exchange(4_000_000, -50_000, 300, 100, 300));
        assert_eq!(c.estimate(), Some((50_000, 300)));
        // Asymmetric legs alone: the error is within δ/2.
        let mut d = ClockOffset::default();
        d.record(exchange(0, -50_000, 2_300, 100, 300));
        let (theta, bound) = d.estimate().expect("one exchange");
        assert!((theta - 50_000).abs() <= bound, "{theta} ± {bound}");
    }

    #[test]
    fn an_exchange_that_went_backwards_is_dropped() {
        let mut c = ClockOffset::default();
        c.record(Exchange { sent: 10, server_received: 5, server_sent: 100, received: 20 });
        assert_eq!(c.estimate(), None);
    }
}
