//! Checkpoints as C2SP signed notes (tlog-checkpoint, signed-note) with Ed25519 keys.
//!
//! A checkpoint is `<origin>\n<size>\n<base64 root>\n`; the signed note adds an empty line and
//! one line per signature, `— <key name> <base64(4-byte key id || 64-byte signature)>\n`. The
//! key id is the first 4 bytes of SHA-256(name || 0x0A || 0x01 || public key). Keys use the
//! standard text forms: the verifier key `name+hexid+base64(0x01||pubkey)` and the private key
//! `PRIVATE+KEY+name+hexid+base64(0x01||seed)` (as Go's `golang.org/x/mod/sumdb/note`).
//! This module signs and checks bytes; it does not know where checkpoints are stored.

use std::fmt;

use crate::merkle::{MerkleHash, TreeSize};
pub use crate::note_error::CheckpointError;
use crate::note_key::check_key_name;
use crate::note_key::{LogKeyKind, PrivateNoteKey, note_key_id};
use base64::Engine as _;
use ed25519_dalek::{Signer as _, Verifier as _};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
/// The signature-line prefix: an em dash and a space.
const SIG_PREFIX: &str = "\u{2014} ";
/// Algorithm byte for Ed25519 keys in signed notes.
const ALG_ED25519: u8 = <LogKeyKind as crate::note_key::NoteKeyKind>::ALG;

/// What a checkpoint commits to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's origin line (its unique name).
    pub origin: String,
    /// Number of entries.
    pub size: TreeSize,
    /// Merkle root of those entries.
    pub root: MerkleHash,
}

impl Checkpoint {
    /// The signed text: origin, size, base64 root, each ending in a newline.
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size.0,
            self.root.to_base64()
        )
    }
}

fn malformed(s: impl Into<String>) -> CheckpointError {
    CheckpointError::Malformed(s.into())
}

/// A signed checkpoint as stored in `log/checkpoint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCheckpoint {
    /// The parsed body.
    pub checkpoint: Checkpoint,
    /// The exact signed text (up to and including the newline before the empty line).
    pub text: String,
    /// The signature lines.
    pub signatures: Vec<NoteSignature>,
}

/// One signature line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    /// Key name.
    pub name: String,
    /// Key id (first 4 bytes of the decoded signature).
    pub key_id: u32,
    /// The signature bytes after the key id.
    pub signature: Vec<u8>,
}

impl SignedCheckpoint {
    /// Parses a signed note and its checkpoint body (signatures are not checked here).
    pub fn parse(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let s = std::str::from_utf8(bytes).map_err(|_| malformed("not UTF-8"))?;
        let split = s
            .rfind("\n\n")
            .ok_or_else(|| malformed("no empty line before the signatures"))?;
        let text = &s[..split + 1];
        let sigs = &s[split + 2..];
        if sigs.is_empty() || !sigs.ends_with('\n') {
            return Err(malformed(
                "signature block is empty or does not end in a newline",
            ));
        }
        let mut signatures = Vec::new();
        for line in sigs[..sigs.len() - 1].split('\n') {
            let rest = line.strip_prefix(SIG_PREFIX).ok_or_else(|| {
                malformed(format!(
                    "signature line {line:?} does not start with an em dash"
                ))
            })?;
            let (name, b64) = rest
                .split_once(' ')
                .ok_or_else(|| malformed(format!("signature line {line:?} has no space")))?;
            let raw = B64
                .decode(b64)
                .map_err(|_| malformed(format!("signature of {name} is not base64")))?;
            if raw.len() < 5 {
                return Err(malformed(format!("signature of {name} is too short")));
            }
            signatures.push(NoteSignature {
                name: name.to_string(),
                key_id: u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]),
                signature: raw[4..].to_vec(),
            });
        }
        let mut lines = text.split('\n');
        let origin = lines
            .next()
            .filter(|o| !o.is_empty())
            .ok_or_else(|| malformed("empty origin line"))?;
        let size_text = lines.next().ok_or_else(|| malformed("no size line"))?;
        if size_text.is_empty()
            || !size_text.bytes().all(|b| b.is_ascii_digit())
            || (size_text.len() > 1 && size_text.starts_with('0'))
        {
            return Err(malformed(format!(
                "size line {size_text:?} is not a decimal number"
            )));
        }
        let size: u64 = size_text
            .parse()
            .map_err(|_| malformed(format!("size line {size_text:?} is too large")))?;
        let root_text = lines.next().ok_or_else(|| malformed("no root hash line"))?;
        let root_raw = B64
            .decode(root_text)
            .map_err(|_| malformed(format!("root line {root_text:?} is not base64")))?;
        let root = MerkleHash::from_slice(&root_raw)
            .ok_or_else(|| malformed(format!("root line {root_text:?} is not 32 bytes")))?;
        Ok(Self {
            checkpoint: Checkpoint {
                origin: origin.to_string(),
                size: TreeSize(size),
                root,
            },
            text: text.to_string(),
            signatures,
        })
    }

    /// The note's bytes: text, empty line, signature lines.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.text.clone();
        out.push('\n');
        for s in &self.signatures {
            out.push_str(&s.to_line());
        }
        out.into_bytes()
    }
}

impl NoteSignature {
    /// The signature line: `— <name> <base64(key id || signature)>` and a newline.
    pub fn to_line(&self) -> String {
        let mut raw = self.key_id.to_be_bytes().to_vec();
        raw.extend_from_slice(&self.signature);
        format!("{SIG_PREFIX}{} {}\n", self.name, B64.encode(raw))
    }
}

/// `SHA-256(name || 0x0A || 0x01 || public key)[:4]`, big-endian.
pub fn key_id(name: &str, public: &[u8; 32]) -> u32 {
    note_key_id(ALG_ED25519, name, public)
}

/// The log's Ed25519 signing key and its name (the log origin).
pub type SigningKey = PrivateNoteKey<LogKeyKind>;

impl PrivateNoteKey<LogKeyKind> {
    /// The matching verifier key.
    pub fn verifier_key(&self) -> VerifierKey {
        let public = self.key.verifying_key();
        VerifierKey {
            name: self.name.clone(),
            key_id: key_id(&self.name, public.as_bytes()),
            key: public,
        }
    }

    /// Signs a checkpoint into a note.
    pub fn sign(&self, checkpoint: Checkpoint) -> SignedCheckpoint {
        let text = checkpoint.body();
        let sig = self.key.sign(text.as_bytes());
        SignedCheckpoint {
            checkpoint,
            text,
            signatures: vec![NoteSignature {
                name: self.name.clone(),
                key_id: self.verifier_key().key_id,
                signature: sig.to_bytes().to_vec(),
            }],
        }
    }
}

/// A verifier key: name, key id and Ed25519 public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    /// Key name (the log origin).
    pub name: String,
    /// Key id.
    pub key_id: u32,
    /// The public key.
    pub key: ed25519_dalek::VerifyingKey,
}

impl fmt::Display for VerifierKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = vec![ALG_ED25519];
        raw.extend_from_slice(self.key.as_bytes());
        write!(f, "{}+{:08x}+{}", self.name, self.key_id, B64.encode(raw))
    }
}

impl std::str::FromStr for VerifierKey {
    type Err = CheckpointError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| CheckpointError::BadKey {
            value: text.chars().take(100).collect(),
            reason: format!("{reason}; expected <name>+<8 hex digits>+<base64(0x01||32-byte key)>"),
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
        if raw.len() != 33 || raw[0] != ALG_ED25519 {
            return Err(bad("key is not 0x01 followed by 32 bytes (Ed25519)"));
        }
        let public: [u8; 32] = raw[1..]
            .try_into()
            .map_err(|_| bad("key is not 32 bytes"))?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(&public)
            .map_err(|_| bad("not a valid Ed25519 point"))?;
        if key_id(name, &public) != id {
            return Err(bad("key id does not match SHA-256(name||0x0A||0x01||key)"));
        }
        Ok(Self {
            name: name.to_string(),
            key_id: id,
            key,
        })
    }
}

impl VerifierKey {
    /// Parses a note and checks that this key signed it; returns the checkpoint.
    pub fn verify(&self, note: &[u8]) -> Result<SignedCheckpoint, CheckpointError> {
        let signed = SignedCheckpoint::parse(note)?;
        let sig = signed
            .signatures
            .iter()
            .find(|s| s.name == self.name && s.key_id == self.key_id)
            .ok_or_else(|| CheckpointError::Unsigned {
                name: self.name.clone(),
                key_id: self.key_id,
            })?;
        let bad = || CheckpointError::BadSignature {
            name: self.name.clone(),
            key_id: self.key_id,
        };
        let sig = ed25519_dalek::Signature::from_slice(&sig.signature).map_err(|_| bad())?;
        self.key
            .verify(signed.text.as_bytes(), &sig)
            .map_err(|_| bad())?;
        if signed.checkpoint.origin != self.name {
            return Err(CheckpointError::WrongOrigin {
                got: signed.checkpoint.origin.clone(),
                expected: self.name.clone(),
            });
        }
        Ok(signed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::empty_root;

    #[test]
    fn sign_parse_verify_round_trip() {
        let key = SigningKey::generate("example.com/log").unwrap();
        let vk = key.verifier_key();
        let signed = key.sign(Checkpoint {
            origin: "example.com/log".into(),
            size: TreeSize(0),
            root: empty_root(),
        });
        let bytes = signed.to_bytes();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("example.com/log\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n\u{2014} example.com/log "), "{text}");
        assert_eq!(vk.verify(&bytes).unwrap(), signed);
        let vk2: VerifierKey = vk.to_string().parse().unwrap();
        assert_eq!(vk2, vk);
        let key2 = SigningKey::parse(&key.to_text()).unwrap();
        assert_eq!(key2.verifier_key(), vk);
    }

    #[test]
    fn altered_text_or_signature_is_rejected() {
        let key = SigningKey::generate("log").unwrap();
        let bytes = key
            .sign(Checkpoint {
                origin: "log".into(),
                size: TreeSize(7),
                root: empty_root(),
            })
            .to_bytes();
        let mut altered = bytes.clone();
        altered[4] = b'8';
        assert!(matches!(
            key.verifier_key().verify(&altered),
            Err(CheckpointError::BadSignature { .. })
        ));
        let other = SigningKey::generate("log").unwrap();
        assert!(matches!(
            other.verifier_key().verify(&bytes),
            Err(CheckpointError::Unsigned { .. })
        ));
        assert!(matches!(
            SignedCheckpoint::parse(b"log\n7\n"),
            Err(CheckpointError::Malformed(_))
        ));
        assert!("log+0000000+AQ==".parse::<VerifierKey>().is_err());
    }
}
