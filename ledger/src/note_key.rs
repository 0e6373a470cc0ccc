//! A signed-note private key: an Ed25519 seed with its key name, of one signature type.
//!
//! The log's checkpoint key (signature type 0x01, [`crate::checkpoint::SigningKey`]) and a
//! witness's cosigning key (type 0x04, [`crate::cosignature::CosigningKey`]) are the same shape:
//! the text form `PRIVATE+KEY+<name>+<hexid>+<base64(type||seed)>`, and a key id of the first 4
//! bytes of SHA-256(name || 0x0A || type || public key). This module holds that shape once; what
//! each kind signs, and its public key type, live with the kind. Not here: public keys or
//! signature checking.

use std::fmt;
use std::marker::PhantomData;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::note_error::CheckpointError;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// One signature type of signed-note keys.
pub trait NoteKeyKind {
    /// The signature type byte (C2SP signed-note).
    const ALG: u8;
    /// The key's type name in `Debug` output.
    const TYPE_NAME: &'static str;
    /// Whose key this is, for error messages ("a witness's private key").
    const WHOSE: &'static str;
}

/// The log's checkpoint-signing keys: plain Ed25519, type 0x01.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKeyKind {}

impl NoteKeyKind for LogKeyKind {
    const ALG: u8 = 0x01;
    const TYPE_NAME: &'static str = "SigningKey";
    const WHOSE: &'static str = "the log's private key";
}

/// A witness's cosigning keys: timestamped Ed25519 `cosignature/v1`, type 0x04.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WitnessKeyKind {}

impl NoteKeyKind for WitnessKeyKind {
    const ALG: u8 = 0x04;
    const TYPE_NAME: &'static str = "CosigningKey";
    const WHOSE: &'static str = "a witness's private key";
}

/// `SHA-256(name || 0x0A || alg || public key)[:4]`, big-endian.
pub fn note_key_id(alg: u8, name: &str, public: &[u8; 32]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0x0A, alg]);
    h.update(public);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// Checks a signed-note key name: non-empty, no spaces, no '+'.
pub(crate) fn check_key_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.contains('+')
        || name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "key name {name:?} must be non-empty, without spaces or '+'"
        ));
    }
    Ok(())
}

/// A named Ed25519 private key of signature type `K`.
pub struct PrivateNoteKey<K: NoteKeyKind> {
    pub(crate) name: String,
    pub(crate) key: ed25519_dalek::SigningKey,
    kind: PhantomData<K>,
}

impl<K: NoteKeyKind> fmt::Debug for PrivateNoteKey<K> {
    /// The public half only: a private key never prints its seed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = vec![K::ALG];
        raw.extend_from_slice(self.key.verifying_key().as_bytes());
        write!(
            f,
            "{}({}+{:08x}+{})",
            K::TYPE_NAME,
            self.name,
            self.key_id(),
            B64.encode(raw)
        )
    }
}

impl<K: NoteKeyKind> PrivateNoteKey<K> {
    /// A fresh key from the operating system's random source.
    pub fn generate(name: &str) -> Result<Self, CheckpointError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| CheckpointError::BadKey {
            value: name.into(),
            reason: format!("no randomness from the operating system: {e}"),
        })?;
        Self::from_seed(name, seed)
    }

    /// A key from a 32-byte seed (tests, and tools that need the same key every run).
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<Self, CheckpointError> {
        check_key_name(name).map_err(|reason| CheckpointError::BadKey {
            value: name.into(),
            reason,
        })?;
        Ok(Self {
            name: name.to_string(),
            key: ed25519_dalek::SigningKey::from_bytes(&seed),
            kind: PhantomData,
        })
    }

    /// The key's name (the log origin, or the witness's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id its signature lines carry.
    pub fn key_id(&self) -> u32 {
        note_key_id(K::ALG, &self.name, self.key.verifying_key().as_bytes())
    }

    /// `PRIVATE+KEY+<name>+<hexid>+<base64(type||seed)>`.
    pub fn to_text(&self) -> String {
        let mut raw = vec![K::ALG];
        raw.extend_from_slice(self.key.as_bytes());
        format!(
            "PRIVATE+KEY+{}+{:08x}+{}",
            self.name,
            self.key_id(),
            B64.encode(raw)
        )
    }

    /// Parses the private key text form, checking its type byte and key id.
    pub fn parse(text: &str) -> Result<Self, CheckpointError> {
        let bad = |reason: &str| CheckpointError::BadKey {
            value: "PRIVATE+KEY+...".into(),
            reason: format!(
                "{reason}; {} is PRIVATE+KEY+<name>+<8 hex>+<base64(0x{:02x}||seed)>",
                K::WHOSE,
                K::ALG
            ),
        };
        let rest = text
            .trim()
            .strip_prefix("PRIVATE+KEY+")
            .ok_or_else(|| bad("missing PRIVATE+KEY+ prefix"))?;
        // The name cannot contain '+'; base64 can: split from the left.
        let mut parts = rest.splitn(3, '+');
        let (name, hexid, b64) = match (parts.next(), parts.next(), parts.next()) {
            (Some(n), Some(h), Some(b)) => (n, h, b),
            _ => return Err(bad("too few '+' separated parts")),
        };
        let raw = B64.decode(b64).map_err(|_| bad("key is not base64"))?;
        if raw.len() != 33 || raw[0] != K::ALG {
            return Err(bad(&format!(
                "key is not 0x{:02x} followed by a 32-byte Ed25519 seed",
                K::ALG
            )));
        }
        let seed: [u8; 32] = raw[1..]
            .try_into()
            .map_err(|_| bad("seed is not 32 bytes"))?;
        let key = Self::from_seed(name, seed)?;
        if format!("{:08x}", key.key_id()) != hexid {
            return Err(bad("key id does not match the name and key"));
        }
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_one_type_is_refused_as_the_other() {
        let log = PrivateNoteKey::<LogKeyKind>::from_seed("log", [7; 32]).unwrap();
        let err = PrivateNoteKey::<WitnessKeyKind>::parse(&log.to_text()).unwrap_err();
        assert!(err.to_string().contains("0x04"), "{err}");
        let back = PrivateNoteKey::<LogKeyKind>::parse(&log.to_text()).unwrap();
        assert_eq!(back.to_text(), log.to_text());
        // The two types' ids differ for the same name and seed: the type byte is hashed in.
        let witness = PrivateNoteKey::<WitnessKeyKind>::from_seed("log", [7; 32]).unwrap();
        assert_ne!(log.key_id(), witness.key_id());
    }

    #[test]
    fn debug_shows_the_public_key_and_never_the_seed() {
        let key = PrivateNoteKey::<LogKeyKind>::from_seed("log", [9; 32]).unwrap();
        let shown = format!("{key:?}");
        assert!(shown.starts_with("SigningKey(log+"), "{shown}");
        let seed_b64 = B64.encode([9u8; 32]);
        assert!(!shown.contains(&seed_b64[..20]), "{shown}");
    }
}
