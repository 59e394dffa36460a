//! Each protocol's control law over a step (the module's list in
//! `transport.rs`): reno, cubic, bbr, DCQCN and MLTCP's scaling of
//! reno's increase, driven by what the connection delivered.

use super::*;

impl Transport {
    /// Connection `c`'s control law over the last `dt` ns; `progress` is
    /// the share of its flow already sent.
    pub(super) fn control(&mut self, c: usize, now: u64, dt: f64, progress: f64) {
        let mss = self.mss_bits;
        let control = self.cfg.control;
        let step_ns = self.cfg.step_ns();
        let rto_ns = (self.cfg.rto_ms.max(0.0) * 1e6) as u64;
        let conn = &mut self.conns[c];
        let rtt = conn.rtt_ns.max(1.0);
        let acked = conn.delivered * dt;
        // Sending less than the window allows (the NIC or a throttle caps
        // it): the window does not grow (RFC 7661's cwnd-limited check).
        let limited = conn.window / rtt <= conn.send * 1.05 + 1e-12;
        if now < conn.stalled_until_ns {
            return;
        }
        // A paced sender keeps sending through its losses, and selective
        // acks recover them a round trip later: its episode is one round
        // trip's drops against what it had in flight, where a window-based
        // sender's lasts while its drops do.
        let episode_over = control == Control::Bbr && now.saturating_sub(conn.loss_start_ns) as f64 >= rtt;
        if !conn.lost {
            conn.dropped = 0.0;
            conn.flight_at_loss = 0.0;
        } else if conn.flight_at_loss == 0.0 || episode_over {
            if episode_over && conn.flight_at_loss > 0.0 {
                conn.dropped = 0.0;
            }
            conn.flight_at_loss = (conn.send * rtt).max(mss);
            conn.loss_start_ns = now;
        }
        // An episode that took all it had in flight leaves nothing to be
        // acked: no duplicate acks, no selective ones for RACK to recover
        // by (Linux recovers any smaller loss, a short window's included),
        // and the tail-loss probe meets the same full queue. The
        // retransmission timer fires (RFC 6298, Linux's minimum of 200 ms)
        // and the window starts again from one segment (RFC 5681 §3.1).
        // DCQCN's fabric is lossless in practice; BBR keeps its estimates.
        if conn.lost && control != Control::Dcqcn && conn.dropped >= conn.flight_at_loss {
            conn.stalled_until_ns = now + rto_ns;
            conn.w_max = conn.window;
            conn.ssthresh = (conn.window / 2.0).max(2.0 * mss);
            conn.window = mss;
            conn.w_est = mss;
            conn.epoch_ns = now + rto_ns;
            conn.cut_ns = now + rto_ns;
            conn.dropped = 0.0;
            conn.flight_at_loss = 0.0;
            conn.timeouts += 1;
            return;
        }
        let cut_due = now.saturating_sub(conn.cut_ns) as f64 >= rtt;
        match control {
            Control::Reno | Control::MltcpReno => {
                if conn.lost && cut_due {
                    conn.ssthresh = (conn.window / 2.0).max(2.0 * mss);
                    conn.window = conn.ssthresh;
                    conn.cut_ns = now;
                } else if !conn.lost && limited {
                    if conn.window < conn.ssthresh {
                        conn.window += acked;
                    } else {
                        let f = if control == Control::MltcpReno { 2.0 * progress.clamp(0.0, 1.0) } else { 1.0 };
                        conn.window += f * mss * acked / conn.window;
                    }
                }
            }
            Control::Cubic => {
                if conn.lost && cut_due {
                    // Fast convergence (RFC 8312 §4.6).
                    conn.w_max =
                        if conn.window < conn.w_max { conn.window * (1.0 + CUBIC_BETA) / 2.0 } else { conn.window };
                    conn.window = (conn.window * CUBIC_BETA).max(2.0 * mss);
                    conn.ssthresh = conn.window;
                    conn.w_est = conn.window;
                    conn.epoch_ns = now;
                    conn.cut_ns = now;
                } else if !conn.lost && limited {
                    if conn.window < conn.ssthresh {
                        conn.window += acked;
                    } else {
                        let t = now.saturating_sub(conn.epoch_ns) as f64 * 1e-9;
                        let w_max = conn.w_max / mss;
                        let k = (w_max * (1.0 - CUBIC_BETA) / CUBIC_C).cbrt();
                        let target = (CUBIC_C * (t + rtt * 1e-9 - k).powi(3) + w_max) * mss;
                        // Per acked segment the window moves (target − W)/W
                        // segments, at most half a segment (RFC 8312 §4.3).
                        let grow = ((target - conn.window) / conn.window).clamp(0.0, 0.5) * acked;
                        conn.w_est += 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA) * mss * acked / conn.window;
                        conn.window = (conn.window + grow).max(conn.w_est);
                    }
                }
            }
            Control::Bbr => {
                // Linux's min-RTT filter (`bbr_update_min_rtt`): a sample
                // replaces the minimum only when lower or when the minimum
                // is 10 s old; an expired minimum sends the flow to
                // ProbeRTT, except on the first acks after an idle restart.
                let expired =
                    conn.min_rtt_ns.is_finite() && now.saturating_sub(conn.min_rtt_stamp_ns) > BBR_MIN_RTT_WINDOW_NS;
                if conn.delivered > 0.0 && (rtt < conn.min_rtt_ns || expired) {
                    conn.min_rtt_ns = rtt;
                    conn.min_rtt_stamp_ns = now;
                }
                if conn.state == BbrState::ProbeRtt && now >= conn.probe_rtt_until_ns {
                    conn.state = BbrState::ProbeBw;
                    conn.phase_start_ns = now;
                    conn.min_rtt_stamp_ns = now;
                } else if conn.state != BbrState::ProbeRtt && expired && !conn.idle_restart {
                    conn.state = BbrState::ProbeRtt;
                    conn.probe_rtt_until_ns = now + BBR_PROBE_RTT_NS;
                }
                if conn.delivered > 0.0 {
                    conn.idle_restart = false;
                }
                conn.round_bits += acked;
                if now.saturating_sub(conn.round_start_ns) as f64 >= rtt {
                    let elapsed = now.saturating_sub(conn.round_start_ns).max(1) as f64;
                    let sample = if conn.round_start_ns == 0 { 0.0 } else { conn.round_bits / elapsed };
                    conn.round += 1;
                    conn.bw_rounds[conn.round % BBR_BW_ROUNDS] = sample;
                    conn.round_bits = 0.0;
                    conn.round_start_ns = now;
                    let bw = btl_bw(conn);
                    match conn.state {
                        BbrState::Startup => {
                            if bw >= conn.full_bw * 1.25 {
                                conn.full_bw = bw;
                                conn.full_bw_rounds = 0;
                            } else {
                                conn.full_bw_rounds += 1;
                                if conn.full_bw_rounds >= 3 {
                                    conn.state = BbrState::Drain;
                                }
                            }
                        }
                        BbrState::Drain => {
                            conn.state = BbrState::ProbeBw;
                            conn.phase_start_ns = now;
                        }
                        BbrState::ProbeBw | BbrState::ProbeRtt => {}
                    }
                }
                if conn.state == BbrState::ProbeBw && now.saturating_sub(conn.phase_start_ns) as f64 >= conn.min_rtt_ns
                {
                    conn.phase = (conn.phase + 1) % BBR_CYCLE.len();
                    conn.phase_start_ns = now;
                }
                // The window (`bbr_set_cwnd`): cwnd_gain × BDP plus Linux's
                // `bbr_quantization_budget`, three TSO bursts and two segments
                // more while probing up. At a datacenter's round trip the BDP
                // is a few segments and the bursts set the window, so the flow
                // is paced, not window-limited. The window grows by what is
                // acked toward it (without limit until the pipe is full) and
                // is four segments in ProbeRTT.
                let min_rtt = if conn.min_rtt_ns.is_finite() { conn.min_rtt_ns } else { rtt };
                let bw = btl_bw(conn).max(INITIAL_WINDOW * mss / min_rtt);
                let cwnd_gain = if conn.state == BbrState::Startup { BBR_HIGH_GAIN } else { 2.0 };
                let probe_up = if conn.state == BbrState::ProbeBw && conn.phase == 0 { 2.0 } else { 0.0 };
                let target = cwnd_gain * bw * min_rtt
                    + (3.0 * bbr_tso_segments(bbr_pacing_gain(conn) * bw, mss) + probe_up) * mss;
                conn.window = if conn.state == BbrState::ProbeRtt {
                    4.0 * mss
                } else if conn.state == BbrState::Startup {
                    conn.window + if conn.window < target { acked } else { 0.0 }
                } else {
                    (conn.window + acked).min(target)
                }
                .max(4.0 * mss);
            }
            Control::Dcqcn => {
                if conn.rate.is_infinite() {
                    // Not yet sending: it starts at line rate (serve).
                    return;
                }
                if conn.marked && now.saturating_sub(conn.cnp_ns) >= DCQCN_CNP_NS {
                    conn.alpha = (1.0 - DCQCN_G) * conn.alpha + DCQCN_G;
                    conn.target = conn.rate;
                    conn.rate *= 1.0 - conn.alpha / 2.0;
                    conn.cnp_ns = now;
                    conn.timer_ns = now;
                    conn.stage = 0;
                } else if now.saturating_sub(conn.timer_ns) >= DCQCN_TIMER_NS.max(step_ns) {
                    conn.alpha *= 1.0 - DCQCN_G;
                    conn.timer_ns = now;
                    conn.stage += 1;
                    if conn.stage > DCQCN_FAST_STAGES {
                        conn.target += DCQCN_AI * conn.line * (conn.stage - DCQCN_FAST_STAGES) as f64;
                    }
                    conn.rate = ((conn.rate + conn.target) / 2.0).min(conn.line);
                    conn.target = conn.target.min(conn.line);
                }
            }
        }
    }
}

/// Linux BBR's TSO burst goal, segments (`bbr_tso_segs_goal`): about 1 ms
/// of the pacing rate (`sk_pacing_shift` 10), at most one 64 KB GSO burst
/// ([`GSO_MAX_SEGMENTS`]), at least 2. `rate` in bits/ns, `mss` in bits.
pub(super) fn bbr_tso_segments(rate: f64, mss: f64) -> f64 {
    (rate * 1e9 / 1024.0 / mss).floor().clamp(2.0, GSO_MAX_SEGMENTS)
}

/// BBR's pacing gain in its state.
pub(super) fn bbr_pacing_gain(conn: &Conn) -> f64 {
    match conn.state {
        BbrState::Startup => BBR_HIGH_GAIN,
        BbrState::Drain => 1.0 / BBR_HIGH_GAIN,
        BbrState::ProbeBw => BBR_CYCLE[conn.phase],
        BbrState::ProbeRtt => 1.0,
    }
}

/// BBR's bottleneck bandwidth: the most delivered in the last rounds.
pub(super) fn btl_bw(conn: &Conn) -> f64 {
    conn.bw_rounds.iter().copied().fold(0.0, f64::max)
}
