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
//! them ([`crate::agent::Agent::receive_from`]). Datagrams are not encrypted,
//! and a recorded datagram can be replayed: the protocol makes replays
//! harmless (a bundle for a decided auction is ignored, merging a bundle
//! twice changes nothing, a finish for a finished job is a no-op).

use crate::agent::Msg;
use crate::utility::JobRequest;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
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
    /// Its auction is open (or was already, or is decided).
    Accepted,
    /// Too many auctions are open here: send it again later.
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
    /// The message.
    pub body: Body,
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
        let env = Envelope { sender: 3, body: Body::Finish(42) };
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
        let mut body = postcard::to_stdvec(&Envelope { sender: 0, body: Body::Finish(7) }).expect("encode");
        body.extend_from_slice(b"junk");
        let mut mac = k.mac();
        mac.update(&body);
        body.extend_from_slice(&mac.finalize().into_bytes());
        assert!(matches!(open(&k, &body), Err(WireError::Trailing(4))));
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
