//! Witness cosignatures per C2SP tlog-cosignature: the timestamped Ed25519 `cosignature/v1`
//! format, the cosigner's keys, and the verifier's quorum policy.
//!
//! A cosignature is one more signed-note line on a checkpoint, `— <witness name>
//! base64(key id || timestamp || signature)`, where the key id is the first 4 bytes of
//! SHA-256(name || 0x0A || 0x04 || public key), the timestamp a big-endian u64 of POSIX
//! seconds, and the Ed25519 signature is over
//!
//! ```text
//! cosignature/v1
//! time <timestamp>
//! <the checkpoint's note text: origin, size, root (and any extension lines)>
//! ```
//!
//! Keys use the signed-note text forms with signature type 0x04: the verifier key
//! `name+hexid+base64(0x04||pubkey)` and the private key `PRIVATE+KEY+name+hexid+base64(0x04||
//! seed)`. A cosignature says "as of this time, this is the largest tree I have seen for this
//! origin, and it extends every one I saw before"; the witness that makes that statement is
//! [`crate::witness`], the log that asks for it is [`crate::cosigning`]. This module only
//! formats, signs and checks bytes.

use std::fmt;

use base64::Engine as _;
use ed25519_dalek::{Signer as _, Verifier as _};

use crate::checkpoint::{CheckpointError, NoteSignature, SignedCheckpoint};
use crate::note_key::{PrivateNoteKey, WitnessKeyKind, check_key_name, note_key_id};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Signature type byte of timestamped Ed25519 checkpoint cosignatures (C2SP signed-note).
pub const ALG_COSIGNATURE_V1: u8 = <WitnessKeyKind as crate::note_key::NoteKeyKind>::ALG;

/// The header line of the signed message, for domain separation.
pub const COSIGNATURE_HEADER: &str = "cosignature/v1";

/// Bytes of a cosignature after the key id: an 8-byte timestamp and a 64-byte signature.
const COSIGNATURE_LEN: usize = 8 + 64;

/// The largest timestamp the format allows (2^63 - 1).
const MAX_TIMESTAMP: u64 = i64::MAX as u64;

/// The message a `cosignature/v1` signs: the header line, the timestamp line, then the note
/// text of the checkpoint (every line of it, ending in a newline, no signature lines).
pub fn cosigned_message(timestamp: u64, note_text: &str) -> Vec<u8> {
    format!("{COSIGNATURE_HEADER}\ntime {timestamp}\n{note_text}").into_bytes()
}

/// `SHA-256(name || 0x0A || 0x04 || public key)[:4]`, big-endian.
pub fn cosigner_key_id(name: &str, public: &[u8; 32]) -> u32 {
    note_key_id(ALG_COSIGNATURE_V1, name, public)
}

/// A witness's public key: name, key id and Ed25519 key, for `cosignature/v1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CosignerKey {
    /// The witness's name (a schema-less URL by convention).
    pub name: String,
    /// Key id.
    pub key_id: u32,
    /// The public key.
    pub key: ed25519_dalek::VerifyingKey,
}

impl fmt::Display for CosignerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = vec![ALG_COSIGNATURE_V1];
        raw.extend_from_slice(self.key.as_bytes());
        write!(f, "{}+{:08x}+{}", self.name, self.key_id, B64.encode(raw))
    }
}

impl std::str::FromStr for CosignerKey {
    type Err = CheckpointError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| CheckpointError::BadKey {
            value: text.chars().take(100).collect(),
            reason: format!(
                "{reason}; a witness key is <name>+<8 hex digits>+<base64(0x04||32-byte Ed25519 key)>"
            ),
        };
        let text = text.trim();
        // The name cannot contain '+'; base64 can: split from the left.
        let mut parts = text.splitn(3, '+');
        let (name, hexid, b64) = match (parts.next(), parts.next(), parts.next()) {
            (Some(n), Some(h), Some(b)) => (n, h, b),
            _ => return Err(bad("too few '+' separated parts")),
        };
        check_key_name(name).map_err(|r| bad(&r))?;
        if hexid.len() != 8 {
            return Err(bad("key id is not 8 hex digits"));
        }
        let id = u32::from_str_radix(hexid, 16).map_err(|_| bad("key id is not hex"))?;
        let raw = B64.decode(b64).map_err(|_| bad("key is not base64"))?;
        match raw.first() {
            Some(&ALG_COSIGNATURE_V1) if raw.len() == 33 => {}
            Some(&0x01) => {
                return Err(bad(
                    "this is a log's signing key (type 0x01), not a witness's cosigning key (type 0x04)",
                ));
            }
            _ => return Err(bad("key is not 0x04 followed by 32 bytes")),
        }
        let public: [u8; 32] = raw[1..]
            .try_into()
            .map_err(|_| bad("key is not 32 bytes"))?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(&public)
            .map_err(|_| bad("not a valid Ed25519 point"))?;
        if cosigner_key_id(name, &public) != id {
            return Err(bad("key id does not match SHA-256(name||0x0A||0x04||key)"));
        }
        Ok(Self {
            name: name.to_string(),
            key_id: id,
            key,
        })
    }
}

/// Why one cosignature line does not count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CosignatureError {
    /// The line is not 4 + 8 + 64 bytes.
    #[error("cosignature of {name} is {got} bytes after the key id, expected {COSIGNATURE_LEN}")]
    WrongLength {
        /// The witness.
        name: String,
        /// Bytes after the key id.
        got: usize,
    },
    /// The timestamp is zero or past 2^63 - 1.
    #[error("cosignature of {name} has timestamp {timestamp}, outside 1..2^63-1")]
    BadTimestamp {
        /// The witness.
        name: String,
        /// The timestamp.
        timestamp: u64,
    },
    /// The Ed25519 signature does not verify over the message.
    #[error("cosignature of {name} (time {timestamp}) does not verify over the checkpoint's text")]
    BadSignature {
        /// The witness.
        name: String,
        /// The timestamp.
        timestamp: u64,
    },
}

impl CosignerKey {
    /// Whether a signature line is by this key (same name and key id; signed-note says every
    /// other line must be ignored).
    pub fn matches(&self, sig: &NoteSignature) -> bool {
        sig.name == self.name && sig.key_id == self.key_id
    }

    /// Checks this witness's cosignature line on `note_text`; returns its timestamp.
    pub fn verify_line(
        &self,
        note_text: &str,
        sig: &NoteSignature,
    ) -> Result<u64, CosignatureError> {
        if sig.signature.len() != COSIGNATURE_LEN {
            return Err(CosignatureError::WrongLength {
                name: self.name.clone(),
                got: sig.signature.len(),
            });
        }
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&sig.signature[..8]);
        let timestamp = u64::from_be_bytes(ts);
        if timestamp == 0 || timestamp > MAX_TIMESTAMP {
            return Err(CosignatureError::BadTimestamp {
                name: self.name.clone(),
                timestamp,
            });
        }
        let bad = || CosignatureError::BadSignature {
            name: self.name.clone(),
            timestamp,
        };
        let signature =
            ed25519_dalek::Signature::from_slice(&sig.signature[8..]).map_err(|_| bad())?;
        self.key
            .verify(&cosigned_message(timestamp, note_text), &signature)
            .map_err(|_| bad())?;
        Ok(timestamp)
    }

    /// This witness's valid cosignature on `checkpoint`, if it has one: `Ok(None)` when no line
    /// is by this key, the timestamp when one verifies, the error when the line is bad.
    pub fn verify(&self, checkpoint: &SignedCheckpoint) -> Result<Option<u64>, CosignatureError> {
        let mut first_err = None;
        for sig in checkpoint.signatures.iter().filter(|s| self.matches(s)) {
            match self.verify_line(&checkpoint.text, sig) {
                Ok(t) => return Ok(Some(t)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }
}

/// A witness's Ed25519 cosigning key and its name.
pub type CosigningKey = PrivateNoteKey<WitnessKeyKind>;

impl PrivateNoteKey<WitnessKeyKind> {
    /// The matching public key.
    pub fn verifier_key(&self) -> CosignerKey {
        let public = self.key.verifying_key();
        CosignerKey {
            name: self.name.clone(),
            key_id: cosigner_key_id(&self.name, public.as_bytes()),
            key: public,
        }
    }

    /// Cosigns a checkpoint's note text at `timestamp` (POSIX seconds, 1..2^63-1).
    pub fn cosign(&self, note_text: &str, timestamp: u64) -> NoteSignature {
        let sig = self.key.sign(&cosigned_message(timestamp, note_text));
        let mut raw = timestamp.to_be_bytes().to_vec();
        raw.extend_from_slice(&sig.to_bytes());
        NoteSignature {
            name: self.name.clone(),
            key_id: self.verifier_key().key_id,
            signature: raw,
        }
    }
}

/// Which witnesses a verifier trusts and how many of them must have cosigned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WitnessPolicy {
    /// The witnesses' keys.
    pub witnesses: Vec<CosignerKey>,
    /// Valid cosignatures needed, each from a different witness.
    pub quorum: usize,
}

/// How one checkpoint's cosignatures measure up against a [`WitnessPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuorumReport {
    /// Witnesses with a valid cosignature, and its timestamp.
    pub cosigned: Vec<(String, u64)>,
    /// Witnesses with no line on the checkpoint.
    pub missing: Vec<String>,
    /// Witnesses whose line does not verify.
    pub invalid: Vec<CosignatureError>,
    /// The quorum asked for.
    pub quorum: usize,
}

impl QuorumReport {
    /// Whether enough witnesses cosigned.
    pub fn met(&self) -> bool {
        self.cosigned.len() >= self.quorum
    }
}

impl fmt::Display for QuorumReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of the {} witnesses given cosigned (quorum {})",
            self.cosigned.len(),
            self.cosigned.len() + self.missing.len() + self.invalid.len(),
            self.quorum
        )?;
        if !self.missing.is_empty() {
            write!(f, "; no cosignature from {}", self.missing.join(", "))?;
        }
        for e in &self.invalid {
            write!(f, "; {e}")?;
        }
        Ok(())
    }
}

impl WitnessPolicy {
    /// Counts the valid cosignatures on `checkpoint`, one per witness.
    pub fn check(&self, checkpoint: &SignedCheckpoint) -> QuorumReport {
        let mut report = QuorumReport {
            quorum: self.quorum,
            ..QuorumReport::default()
        };
        for w in &self.witnesses {
            match w.verify(checkpoint) {
                Ok(Some(t)) => report.cosigned.push((w.name.clone(), t)),
                Ok(None) => report.missing.push(w.name.clone()),
                Err(e) => report.invalid.push(e),
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{Checkpoint, SigningKey};
    use crate::merkle::{TreeSize, empty_root};

    #[test]
    fn keys_round_trip_and_refuse_the_other_type() {
        let k = CosigningKey::generate("witness.example/w1").unwrap();
        let vk = k.verifier_key();
        let parsed: CosignerKey = vk.to_string().parse().unwrap();
        assert_eq!(parsed, vk);
        assert_eq!(
            CosigningKey::parse(&k.to_text()).unwrap().verifier_key(),
            vk
        );
        let log = SigningKey::generate("log.example").unwrap();
        let err = log
            .verifier_key()
            .to_string()
            .parse::<CosignerKey>()
            .unwrap_err();
        assert!(err.to_string().contains("type 0x01"), "{err}");
    }

    #[test]
    fn a_cosignature_counts_once_and_only_on_its_text() {
        let log = SigningKey::generate("log.example").unwrap();
        let w = CosigningKey::generate("w1").unwrap();
        let mut cp = log.sign(Checkpoint {
            origin: "log.example".into(),
            size: TreeSize(0),
            root: empty_root(),
        });
        cp.signatures.push(w.cosign(&cp.text, 1_700_000_000));
        let policy = WitnessPolicy {
            witnesses: vec![w.verifier_key()],
            quorum: 1,
        };
        let r = policy.check(&cp);
        assert!(r.met(), "{r}");
        assert_eq!(r.cosigned, vec![("w1".to_string(), 1_700_000_000)]);
        // The same line on another checkpoint's text does not verify.
        let mut other = log.sign(Checkpoint {
            origin: "log.example".into(),
            size: TreeSize(1),
            root: empty_root(),
        });
        other.signatures.push(cp.signatures[1].clone());
        let r = policy.check(&other);
        assert!(!r.met());
        assert!(matches!(
            r.invalid[0],
            CosignatureError::BadSignature { .. }
        ));
    }
}
