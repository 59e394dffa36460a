//! Datagrams between Plebiscito agents and from their clients, authenticated.
//!
//! A datagram is a postcard-encoded [`Envelope`] (who sends, and what)
//! followed by a 32-byte HMAC-SHA-256 tag over those bytes, keyed by the
//! cluster's pre-shared key. [`open`] refuses a datagram whose tag does not
//! verify (compared in constant time), that is too short to hold a tag, or
//! whose body does not decode to exactly the bytes the tag covers (no
//! trailing junk).
//!
//! What the key protects: nobody without it can make an agent act on a
//! datagram, whatever they send. What it does not: every agent and client of
//! a cluster holds the same key, so a key holder can claim any sender id; the
//! driver therefore also checks the id against the peer's address (see
//! [`Envelope::sender`]), and an agent accepts bids only for the node that sent
//! them ([`crate::agent::Agent::receive_from`]). Datagrams are not encrypted.
//!
//! **Replays.** Every envelope carries its sender's wall-clock time and a
//! random nonce, both under the tag. A receiver's [`ReplayGuard`] admits a
//! datagram only if its time is within [`REPLAY_WINDOW_US`] of the receiver's
//! clock and its `(time, sender, nonce)` has not been admitted before; it
//! remembers admitted datagrams for the window only, so memory is bounded by
//! the rate times the window (and capped at [`MAX_REMEMBERED`]).
//!
//! Why a timestamp window with a seen-set and not per-sender sequence
//! numbers: every client shares the sender id [`CLIENT`], senders restart
//! (a sequence would restart with them, or need a durable counter), and UDP
//! reorders (a high-water mark would drop early datagrams that arrive late).
//! The price is clocks within the window of each other, which NTP gives every
//! real cluster by orders of magnitude. What the window leaves, a receiver
//! that restarts inside it, the protocol covers: a restarted agent learns what
//! was decided before it bids, and a Submit of a decided job is answered with
//! its verdict, not a new auction ([`crate::daemon`]).

use crate::agent::Msg;
use crate::utility::JobRequest;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::BTreeSet;
use std::path::Path;

/// Bytes of the tag at the end of every datagram.
pub const TAG_BYTES: usize = 32;
/// Shortest key accepted, bytes.
pub const MIN_KEY_BYTES: usize = 16;
/// The sender id of a client (`orrery agent --submit`), not an agent.
pub const CLIENT: u32 = u32::MAX;

/// What a datagram carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Body {
    /// Protocol traffic between agents.
    Protocol(Msg),
    /// Start an auction for a job (from a client).
    Submit(JobRequest),
    /// A placed job finished (from a client).
    Finish(u64),
    /// A restarted agent asks a peer what was decided.
    SyncRequest,
    /// A peer's answer to [`Body::SyncRequest`], in chunks that fit a datagram.
    SyncReply {
        /// Verdicts by job.
        verdicts: Vec<(u64, crate::agent::Verdict)>,
        /// Placements still running.
        placed: Vec<(JobRequest, crate::utility::Placement)>,
        /// Whether this is the reply's last chunk.
        last: bool,
    },
    /// An agent's answer to a submission (to the client).
    Receipt {
        /// The job.
        job: u64,
        /// What became of it.
        outcome: Receipt,
    },
}

/// What an agent did with a submitted job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Receipt {
    /// Its auction is open here (now, or already).
    Accepted,
    /// It was decided before (a job id is auctioned once): the verdict, and
    /// whether the job has finished since.
    Decided(String),
    /// Too many auctions are open here, or the agent is still learning what
    /// was decided while it was away: send it again later.
    Busy,
    /// It can never be placed: the reason.
    Refused(String),
}

/// A datagram before sealing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The sending agent's id, or [`CLIENT`]. Covered by the tag; the
    /// receiving driver checks it against the datagram's source address.
    pub sender: u32,
    /// The sender's wall clock when it sealed this, µs since the Unix epoch.
    pub sent_us: u64,
    /// Random, so that two datagrams of one sender in one µs differ.
    pub nonce: u64,
    /// The message.
    pub body: Body,
}

impl Envelope {
    /// An envelope stamped now with a fresh random nonce.
    pub fn now(sender: u32, body: Body) -> Envelope {
        Envelope::at(sender, wall_clock_us(), body)
    }

    /// An envelope stamped `sent_us` (a sans-IO caller's wall clock) with a
    /// fresh random nonce.
    pub fn at(sender: u32, sent_us: u64, body: Body) -> Envelope {
        Envelope { sender, sent_us, nonce: rand::random(), body }
    }
}

/// The wall clock, µs since the Unix epoch (0 if the clock is before it).
pub fn wall_clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// How far a datagram's send time may be from the receiver's clock, µs
/// (either way): 30 s, far beyond NTP's error and any datagram's flight.
pub const REPLAY_WINDOW_US: u64 = 30_000_000;
/// Most datagrams a [`ReplayGuard`] remembers: past it, new datagrams are
/// refused until old ones leave the window (only a key holder can fill it).
pub const MAX_REMEMBERED: usize = 1 << 20;

/// Refuses replayed datagrams (see the module doc).
#[derive(Debug, Default, Clone)]
pub struct ReplayGuard {
    /// Admitted `(sent_us, sender, nonce)`, ordered by time so that the
    /// window's tail is cut in one split. O(log n) per datagram.
    seen: BTreeSet<(u64, u32, u64)>,
}

impl ReplayGuard {
    /// Admits an envelope received at `wall_us` (the receiver's wall clock,
    /// µs), or says why not. Amortised O(log n) for n remembered.
    pub fn admit(&mut self, envelope: &Envelope, wall_us: u64) -> Result<(), WireError> {
        let oldest = wall_us.saturating_sub(REPLAY_WINDOW_US);
        self.seen = self.seen.split_off(&(oldest, 0, 0));
        let sent = envelope.sent_us;
        if sent < oldest || sent > wall_us.saturating_add(REPLAY_WINDOW_US) {
            let skew_ms = (i128::from(sent) - i128::from(wall_us)) / 1000;
            return Err(WireError::Stale { skew_ms });
        }
        if self.seen.contains(&(sent, envelope.sender, envelope.nonce)) {
            return Err(WireError::Replayed);
        }
        if self.seen.len() >= MAX_REMEMBERED {
            return Err(WireError::Flooded);
        }
        self.seen.insert((sent, envelope.sender, envelope.nonce));
        Ok(())
    }

    /// Datagrams remembered now.
    pub fn remembered(&self) -> usize {
        self.seen.len()
    }
}

/// Why a datagram or a key was refused.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Shorter than a tag.
    #[error("{0} bytes, shorter than the {TAG_BYTES}-byte tag")]
    Short(usize),
    /// The tag does not match the bytes under the cluster's key.
    #[error("the tag does not verify (wrong key, or altered in transit)")]
    BadTag,
    /// Authentic but not an envelope (a different version of orrery).
    #[error("does not decode: {0}")]
    Decode(#[from] postcard::Error),
    /// Authentic envelope followed by bytes it does not cover.
    #[error("{0} bytes after the message")]
    Trailing(usize),
    /// Sent outside the replay window of the receiver's clock.
    #[error(
        "sent {skew_ms} ms from this host's clock, outside the ±{} s replay window (a replay, or clocks not synchronised)",
        REPLAY_WINDOW_US / 1_000_000
    )]
    Stale {
        /// Send time minus the receiver's clock, ms.
        skew_ms: i128,
    },
    /// Admitted before: a replay (or a duplicate the network made).
    #[error("a replay of a datagram already received")]
    Replayed,
    /// The replay guard is full (a flood from a key holder).
    #[error("more than {MAX_REMEMBERED} datagrams inside the replay window")]
    Flooded,
    /// The key file could not be read.
    #[error("{path}: {source}")]
    KeyFile {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The key file can be read by other users.
    #[error("{path}: mode {mode:o} lets other users read the key; expected 600 (chmod 600 {path})")]
    KeyMode {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The key is too short.
    #[error(
        "{path}: the key has {len} bytes; expected at least {MIN_KEY_BYTES} (e.g. head -c 32 /dev/urandom > {path})"
    )]
    KeyShort {
        /// The file.
        path: String,
        /// Its length.
        len: usize,
    },
}

/// A cluster's pre-shared key.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({} bytes)", self.0.len())
    }
}

impl Key {
    /// A key from its bytes (at least [`MIN_KEY_BYTES`]).
    pub fn new(bytes: Vec<u8>) -> Result<Key, WireError> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(WireError::KeyShort { path: "key".into(), len: bytes.len() });
        }
        Ok(Key(bytes))
    }

    /// Reads a key file: its bytes are the key. On Unix the file must not
    /// be readable or writable by group or others (mode 600 or stricter).
    pub fn read(path: &Path) -> Result<Key, WireError> {
        let shown = path.display().to_string();
        let io = |source| WireError::KeyFile { path: shown.clone(), source };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(WireError::KeyMode { path: shown, mode });
            }
        }
        let bytes = std::fs::read(path).map_err(io)?;
        if bytes.len() < MIN_KEY_BYTES {
            return Err(WireError::KeyShort { path: shown, len: bytes.len() });
        }
        Ok(Key(bytes))
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"))
    }
}

/// Encodes and tags an envelope. O(bytes).
pub fn seal(key: &Key, envelope: &Envelope) -> Vec<u8> {
    let mut bytes = postcard::to_stdvec(envelope).unwrap_or_default();
    let mut mac = key.mac();
    mac.update(&bytes);
    bytes.extend_from_slice(&mac.finalize().into_bytes());
    bytes
}

/// Verifies a datagram's tag and decodes it; nothing is decoded before the
/// tag verifies. O(bytes).
pub fn open(key: &Key, datagram: &[u8]) -> Result<Envelope, WireError> {
    let body_len = datagram.len().checked_sub(TAG_BYTES).ok_or(WireError::Short(datagram.len()))?;
    let (body, tag) = datagram.split_at(body_len);
    let mut mac = key.mac();
    mac.update(body);
    mac.verify_slice(tag).map_err(|_| WireError::BadTag)?;
    let (envelope, rest) = postcard::take_from_bytes::<Envelope>(body)?;
    if !rest.is_empty() {
        return Err(WireError::Trailing(rest.len()));
    }
    Ok(envelope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> Key {
        Key::new(vec![b; 32]).expect("key")
    }

    #[test]
    fn sealed_datagrams_open_with_the_key_only() {
        let env = Envelope { sender: 3, sent_us: 5, nonce: 6, body: Body::Finish(42) };
        let d = seal(&key(1), &env);
        assert_eq!(open(&key(1), &d).expect("opens"), env);
        assert!(matches!(open(&key(2), &d), Err(WireError::BadTag)));
        // Every single-bit flip is caught.
        for i in 0..d.len() {
            let mut f = d.clone();
            f[i] ^= 1;
            assert!(open(&key(1), &f).is_err(), "bit flip at byte {i} accepted");
        }
        // Truncated anywhere, or the tag alone.
        for n in 0..d.len() {
            assert!(open(&key(1), &d[..n]).is_err(), "{n}-byte prefix accepted");
        }
    }

    #[test]
    fn an_authentic_body_with_trailing_bytes_is_refused() {
        let k = key(1);
        let mut body =
            postcard::to_stdvec(&Envelope { sender: 0, sent_us: 1, nonce: 2, body: Body::Finish(7) }).expect("encode");
        body.extend_from_slice(b"junk");
        let mut mac = k.mac();
        mac.update(&body);
        body.extend_from_slice(&mac.finalize().into_bytes());
        assert!(matches!(open(&k, &body), Err(WireError::Trailing(4))));
    }

    #[test]
    fn replays_and_stale_datagrams_are_refused_and_the_window_forgets() {
        let mut guard = ReplayGuard::default();
        let now = 1_800_000_000_000_000; // 2027, µs
        let env = |sender, sent_us, nonce| Envelope { sender, sent_us, nonce, body: Body::Finish(1) };
        guard.admit(&env(CLIENT, now, 7), now).expect("fresh");
        assert!(matches!(guard.admit(&env(CLIENT, now, 7), now + 1), Err(WireError::Replayed)));
        // Same time, other nonce or other sender: a different datagram.
        guard.admit(&env(CLIENT, now, 8), now).expect("other nonce");
        guard.admit(&env(3, now, 7), now).expect("other sender");
        // 30 s and 1 µs old, or that far ahead: refused with the skew named.
        let e = guard.admit(&env(2, now - REPLAY_WINDOW_US - 1, 1), now).expect_err("stale");
        assert!(e.to_string().contains("-30000 ms"), "{e}");
        assert!(matches!(guard.admit(&env(2, now + REPLAY_WINDOW_US + 1, 1), now), Err(WireError::Stale { .. })));
        // Exactly at the window's edges: admitted.
        guard.admit(&env(2, now - REPLAY_WINDOW_US, 1), now).expect("oldest admitted");
        guard.admit(&env(2, now + REPLAY_WINDOW_US, 1), now).expect("newest admitted");
        assert_eq!(guard.remembered(), 5);
        // Once the window has passed them, they are forgotten (and a replay
        // of them is stale, so still refused).
        let later = now + 2 * REPLAY_WINDOW_US;
        assert!(matches!(guard.admit(&env(CLIENT, now, 7), later), Err(WireError::Stale { .. })));
        assert_eq!(guard.remembered(), 1, "only the datagram stamped now + 30 s is inside the window");
        // A clock before 1970 or at the end of time does not overflow.
        assert!(guard.admit(&env(1, u64::MAX, 0), 0).is_err());
        assert!(guard.admit(&env(1, 0, 0), u64::MAX).is_err());
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(matches!(Key::new(vec![0; 15]), Err(WireError::KeyShort { len: 15, .. })));
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let f = dir.path().join("key");
        std::fs::write(&f, [7u8; 32]).expect("write");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = Key::read(&f).expect_err("world-readable").to_string();
        assert!(e.contains("mode 644") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(Key::read(&f).is_ok());
    }
}
