//! Packet captures of the hosts' TCP traffic (`orrery testbed compare
//! --pcap`, issue 68), and what they say about the run's retransmissions:
//! which the retransmission timer fired, how long the connection had been
//! silent before it, and whether the range it re-sent had been sent again
//! once already (a lost retransmission) or only once before.
//!
//! The kernel's counters (`TcpExt: TCPTimeouts`) say how many timeouts a
//! run had; a capture says which transmission each one followed, which is
//! what a transport model has to reproduce. `tcpdump` (Debian's package)
//! runs in each host's namespace on every interface, keeping each packet's
//! headers only (128 bytes); the files stay in the run's folder for
//! Wireshark.

use crate::fabric::Fabric;
use anyhow::{Context, Result, bail};
use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
use pcap_parser::Linktype;
use pcap_parser::pcap::{parse_pcap_frame, parse_pcap_frame_be, parse_pcap_header};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Linux's least retransmission timeout (`TCP_RTO_MIN`): a retransmission
/// after at least this much silence on its connection was the timer's.
/// (A fast retransmission or a loss probe follows an ack within a few
/// round trips; the testbed's are under 3 ms.)
pub const RTO_MIN_S: f64 = 0.2;

/// Bytes of each packet kept: link, IP and TCP headers with options.
const SNAPLEN: &str = "128";

/// `tcpdump` running in each host's namespace.
#[derive(Debug)]
pub struct Capture {
    dumps: Vec<(PathBuf, Child)>,
}

impl Capture {
    /// Starts a capture of TCP in each of the fabric's first `hosts` host
    /// namespaces into `dir/HOST.pcap`, and waits until each has written
    /// its file's header (it is listening). An error when `tcpdump` is not
    /// installed or does not start within 5 s; the ones started are
    /// stopped.
    pub fn start(fabric: &Fabric, hosts: usize, dir: &Path) -> Result<Capture> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut capture = Capture { dumps: Vec::new() };
        for h in 0..hosts.min(fabric.netns.len()) {
            let ns = fabric.host_netns(h);
            let file = dir.join(format!("{ns}.pcap"));
            let child = Command::new("ip")
                .args(["netns", "exec", ns, "tcpdump", "-i", "any", "-s", SNAPLEN, "-U", "-n", "-w"])
                .arg(&file)
                .arg("tcp")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("starting tcpdump in {ns} (apt-get install tcpdump)"))?;
            capture.dumps.push((file, child));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (file, child) in &mut capture.dumps {
            while std::fs::metadata(&*file).map_or(0, |m| m.len()) < 24 {
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "tcpdump for {} exited at once ({status}): is it installed (apt-get install tcpdump)?",
                        file.display()
                    );
                }
                if Instant::now() > deadline {
                    bail!("tcpdump for {} wrote nothing in 5 s", file.display());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(capture)
    }

    /// Stops every `tcpdump` (SIGTERM: each flushes and closes its file)
    /// and returns the files.
    pub fn stop(mut self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for (file, mut child) in self.dumps.drain(..) {
            terminate(&mut child);
            files.push(file);
        }
        files
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        for (_, child) in &mut self.dumps {
            terminate(child);
        }
    }
}

/// SIGTERM to `ip netns exec`, which became `tcpdump` (exec), then reaped.
fn terminate(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
    }
    let _ = child.wait();
}

/// A TCP connection as one host sends on it: source and destination
/// address and port. Shown as `src:port>dst:port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Connection {
    /// Source address and port.
    pub from: std::net::SocketAddrV4,
    /// Destination address and port.
    pub to: std::net::SocketAddrV4,
}

impl std::fmt::Display for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}>{}", self.from, self.to)
    }
}

/// One data segment a host sent: when (s, the capture's clock), its
/// connection, its first sequence number and its payload's length.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Capture time, s.
    pub t: f64,
    /// Its connection: a key of plain data, where a string made per
    /// segment was an allocation for each of a run's millions.
    pub connection: Connection,
    /// Sequence number of its first byte.
    pub seq: u32,
    /// Payload bytes (from the IP header's length: the capture keeps
    /// headers only).
    pub len: u32,
}

/// A retransmission the timer fired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimedOut {
    /// Capture time, s since the epoch.
    pub t_s: f64,
    /// "src:port>dst:port".
    pub connection: String,
    /// Silence on the connection before it, ms.
    pub silent_ms: f64,
    /// Bytes it re-sent.
    pub bytes: u64,
    /// The re-send of its range that was lost before it, if there was
    /// one; otherwise the range had been sent once.
    #[serde(default)]
    pub lost_copy: Option<LostCopy>,
}

impl TimedOut {
    /// Whether its range had been re-sent before, and that was lost too.
    pub fn lost_retransmission(&self) -> bool {
        self.lost_copy.is_some()
    }
}

/// A re-send that was lost before the timer's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LostCopy {
    /// Its bytes (Linux re-sends a range as one burst).
    pub bytes: u64,
    /// How long after the connection's transmission before it it went
    /// out, ms.
    pub after_ms: f64,
}

/// What a run's captures show of its retransmissions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Retransmits {
    /// Payload bytes sent in all.
    pub bytes: u64,
    /// Payload bytes sent again.
    pub bytes_resent: u64,
    /// Retransmissions after less than [`RTO_MIN_S`] of silence (fast
    /// retransmissions, RACK's and loss probes).
    pub fast: u64,
    /// Retransmissions the timer fired, in time order.
    pub timed_out: Vec<TimedOut>,
}

/// The data segments the capture's host sent, in capture order. Reads
/// pcap files of Ethernet, Linux cooked (`-i any`: SLL and SLL2) or raw IP
/// frames; on cooked frames only the outgoing ones count, elsewhere every
/// data segment does. O(packets).
pub fn sent_segments(path: &Path) -> Result<Vec<Segment>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let (mut rest, header) =
        parse_pcap_header(&bytes).map_err(|e| anyhow::anyhow!("{}: not a pcap file ({e:?})", path.display()))?;
    let frame = if header.is_bigendian() { parse_pcap_frame_be } else { parse_pcap_frame };
    let sub_second = if header.is_nanosecond_precision() { 1e-9 } else { 1e-6 };
    let link = header.network;
    let mut out = Vec::new();
    let mut index = 0usize;
    while !rest.is_empty() {
        index += 1;
        let (next, packet) = match frame(rest) {
            Ok(parsed) => parsed,
            // A capture cut off mid-packet (tcpdump stopped): what came before stands.
            Err(pcap_parser::nom::Err::Incomplete(_)) => break,
            Err(e) => bail!("{}: packet {index}: {e:?}", path.display()),
        };
        rest = next;
        let data = packet.data;
        // (IP bytes, whether the frame is known to be outgoing)
        let (ip, outgoing) = match link {
            Linktype::ETHERNET if data.len() > 14 => (&data[14..], true),
            Linktype::RAW | Linktype::IPV4 => (data, true),
            // SLL: packet type (2 bytes, 4 = sent by us) ... 16-byte header.
            Linktype::LINUX_SLL if data.len() > 16 => (&data[16..], u16::from_be_bytes([data[0], data[1]]) == 4),
            // SLL2: protocol, reserved, interface, ARPHRD, packet type at 10.
            Linktype::LINUX_SLL2 if data.len() > 20 => (&data[20..], data[10] == 4),
            Linktype::ETHERNET | Linktype::LINUX_SLL | Linktype::LINUX_SLL2 => continue,
            other => bail!("{}: link type {other}; expected Ethernet, Linux cooked or raw IP", path.display()),
        };
        if !outgoing {
            continue;
        }
        let Ok(sliced) = LaxSlicedPacket::from_ip(ip) else { continue };
        let (Some(LaxNetSlice::Ipv4(v4)), Some(TransportSlice::Tcp(tcp))) = (&sliced.net, &sliced.transport) else {
            continue;
        };
        let h = v4.header();
        let headers = u32::from(h.ihl()) * 4 + u32::from(tcp.data_offset()) * 4;
        let len = u32::from(h.total_len()).saturating_sub(headers);
        if len == 0 || tcp.syn() {
            continue;
        }
        out.push(Segment {
            t: f64::from(packet.ts_sec) + f64::from(packet.ts_usec) * sub_second,
            connection: Connection {
                from: std::net::SocketAddrV4::new(h.source_addr(), tcp.source_port()),
                to: std::net::SocketAddrV4::new(h.destination_addr(), tcp.destination_port()),
            },
            seq: tcp.sequence_number(),
            len,
        });
    }
    Ok(out)
}

/// The retransmissions among `segments` (one host's, in capture order):
/// a segment that starts below the highest byte its connection has sent
/// is one; it is the timer's when its connection had been silent for at
/// least [`RTO_MIN_S`]. Sequence numbers are followed across their 2³²
/// wrap. O(segments · re-sent ranges of the connection's last second).
pub fn retransmits(segments: &[Segment]) -> Retransmits {
    #[derive(Default)]
    struct Conn {
        /// One past the highest byte sent (unwrapped), and when it last sent.
        high: Option<i64>,
        last_t: f64,
        /// Ranges re-sent (when, first byte, end, and the silence before
        /// it, s): kept for a second.
        resent: Vec<(f64, i64, i64, f64)>,
    }
    let mut conns: HashMap<Connection, Conn> = HashMap::new();
    let mut out = Retransmits::default();
    for s in segments {
        let c = conns.entry(s.connection).or_default();
        let start = match c.high {
            // Nearest to the highest byte sent, within ±2³¹.
            Some(high) => high + i64::from(s.seq.wrapping_sub(high as u32) as i32),
            None => i64::from(s.seq),
        };
        let end = start + i64::from(s.len);
        out.bytes += u64::from(s.len);
        let high = c.high.unwrap_or(start);
        if start < high {
            out.bytes_resent += u64::from(s.len);
            let silent = s.t - c.last_t;
            c.resent.retain(|&(t, _, _, _)| s.t - t <= 1.0);
            let copy = c.resent.iter().rev().find(|&&(_, a, b, _)| a < end && start < b);
            let lost_copy = copy.map(|&(_, a, b, before)| LostCopy { bytes: (b - a) as u64, after_ms: before * 1e3 });
            if silent >= RTO_MIN_S * (1.0 - 1e-3) {
                out.timed_out.push(TimedOut {
                    t_s: s.t,
                    connection: s.connection.to_string(),
                    silent_ms: silent * 1e3,
                    bytes: u64::from(s.len),
                    lost_copy,
                });
            } else {
                out.fast += 1;
            }
            c.resent.push((s.t, start, end, silent));
        }
        c.high = Some(high.max(end));
        c.last_t = s.t;
    }
    out
}

/// [`retransmits`] of every host's capture, summed; the timeouts in time
/// order.
pub fn retransmits_in(files: &[PathBuf]) -> Result<Retransmits> {
    let mut all = Retransmits::default();
    for f in files {
        let r = retransmits(&sent_segments(f)?);
        all.bytes += r.bytes;
        all.bytes_resent += r.bytes_resent;
        all.fast += r.fast;
        all.timed_out.extend(r.timed_out);
    }
    all.timed_out.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(t: f64, seq: u32, len: u32) -> Segment {
        let connection =
            Connection { from: "10.0.0.1:5".parse().expect("address"), to: "10.0.0.2:6".parse().expect("address") };
        Segment { t, connection, seq, len }
    }

    /// The first cubic timeout captured on the testbed (2026-12-05),
    /// reduced: a 1,448-byte segment lost at a step's start, re-sent at
    /// once, that retransmission lost too, and the timer's after 209 ms.
    #[test]
    fn a_retransmission_after_the_least_timeout_of_silence_is_the_timers() {
        let segments = [
            seg(0.000, 1000, 1448),
            seg(0.001, 2448, 1448),
            seg(0.003, 1000, 1448), // fast: the first copy lost
            seg(0.212, 1000, 1448), // the timer's: the second copy lost too
            seg(0.213, 3896, 1448),
            seg(0.600, 5344, 100),
            seg(0.900, 5344, 100), // the timer's, sent once before
        ];
        let r = retransmits(&segments);
        assert_eq!((r.bytes, r.bytes_resent, r.fast), (5 * 1448 + 200, 2 * 1448 + 100, 1));
        let seen: Vec<(bool, u64)> = r.timed_out.iter().map(|t| (t.lost_retransmission(), t.bytes)).collect();
        assert_eq!(seen, [(true, 1448), (false, 100)]);
        let copy = r.timed_out[0].lost_copy.expect("the lost re-send");
        assert_eq!(copy.bytes, 1448);
        assert!((copy.after_ms - 2.0).abs() < 1e-6);
        assert_eq!(r.timed_out[1].lost_copy, None);
        assert!((r.timed_out[0].silent_ms - 209.0).abs() < 1e-6);
    }

    /// A real capture (`tests/data/cubic-lost-retransmission.pcap`: 193
    /// packets of one ring connection, from `orrery testbed compare
    /// experiments/cassini-pair.toml --policies pinned:in-step --cc cubic`
    /// on 2026-12-05, Linux SLL2 frames cut at 96 bytes). The step starts
    /// at 1891.0277 s; a 52,128-byte GSO burst sent at 1891.0419 is lost,
    /// the next one is selectively acked, the lost burst is sent again at
    /// 1891.0457 and lost again, and nothing is acked until the timer
    /// re-sends its first segment 209 ms later.
    #[test]
    fn a_real_capture_shows_the_timeout_after_a_lost_retransmission() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cubic-lost-retransmission.pcap");
        let segments = sent_segments(&path).expect("the capture reads");
        assert!(segments.iter().all(|s| s.connection.to_string() == "10.64.0.9:57712>10.64.0.1:20000"));
        let first = &segments[0];
        assert_eq!((first.seq, first.len), (3_933_643_339, 16));
        assert!((first.t - 1_796_451_891.027_748).abs() < 1e-6);
        let r = retransmits(&segments);
        assert_eq!(r.timed_out.len(), 1, "{:?}", r.timed_out);
        let t = &r.timed_out[0];
        assert!(t.lost_retransmission());
        assert_eq!(t.bytes, 1448);
        // What was lost again: the whole 52,128-byte burst, re-sent 2.1 ms
        // after the burst that was acked.
        let copy = t.lost_copy.expect("the lost re-send");
        assert_eq!(copy.bytes, 52_128);
        assert!((copy.after_ms - 2.12).abs() < 0.01, "{}", copy.after_ms);
        assert!((t.silent_ms - 209.16).abs() < 0.01, "{}", t.silent_ms);
        // The lost burst's first retransmission was a fast one.
        assert!(r.fast >= 1);
        assert!(r.bytes_resent >= 52_128 + 1448);
    }

    /// A connection whose sequence numbers wrap past 2³² sends new data,
    /// not retransmissions (the bbr runs' first reading took every segment
    /// after the wrap for one).
    #[test]
    fn sequence_numbers_are_followed_across_their_wrap() {
        let start = u32::MAX - 2_000;
        let segments =
            [seg(0.0, start, 1448), seg(0.5, start.wrapping_add(1448), 1448), seg(0.9, start.wrapping_add(2896), 1448)];
        let r = retransmits(&segments);
        assert_eq!((r.bytes_resent, r.fast, r.timed_out.len()), (0, 0, 0));
    }
}
