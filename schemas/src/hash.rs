//! Content hashes and their one text form, `blake3:<64 lowercase hex>`.
//!
//! [`Blake3Hash`] is the raw 32-byte digest; [`SpecHash`] and [`BlobHash`] are newtypes over it so
//! that a spec hash can never be passed where a blob hash is expected (they hash different
//! things: canonical JSON of a spec versus the raw bytes of a blob). This module does not know
//! where blobs live or how specs are canonicalised; it only names digests.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The prefix of every hash's text form.
pub const HASH_PREFIX: &str = "blake3:";

/// A BLAKE3 digest (32 bytes), written `blake3:<64 lowercase hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Blake3Hash([u8; 32]);

impl Blake3Hash {
    /// Wraps raw digest bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Hashes `data` in one call (for small inputs; stream large ones with [`blake3::Hasher`]).
    pub fn of(data: &[u8]) -> Self {
        Self(*blake3::hash(data).as_bytes())
    }

    /// The raw digest bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 lowercase hex digits, without the `blake3:` prefix (used for blob paths).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl From<blake3::Hash> for Blake3Hash {
    fn from(h: blake3::Hash) -> Self {
        Self(*h.as_bytes())
    }
}

impl fmt::Display for Blake3Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{HASH_PREFIX}{}", self.to_hex())
    }
}

impl fmt::Debug for Blake3Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a string is not a hash. The message says what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not a hash: {reason}; expected `blake3:` followed by 64 lowercase hex digits"
)]
pub struct HashParseError {
    /// The text that was given (cut to 80 characters).
    pub value: String,
    /// What exactly is wrong with it.
    pub reason: &'static str,
}

impl FromStr for Blake3Hash {
    type Err = HashParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| HashParseError {
            value: s.chars().take(80).collect(),
            reason,
        };
        let hex_part = s
            .strip_prefix(HASH_PREFIX)
            .ok_or_else(|| err("missing the `blake3:` prefix"))?;
        if hex_part.len() != 64 {
            return Err(err("wrong length"));
        }
        if !hex_part
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(err("not lowercase hex"));
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| err("not lowercase hex"))?;
        Ok(Self(bytes))
    }
}

impl Serialize for Blake3Hash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Blake3Hash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Blake3Hash {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Blake3Hash".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^blake3:[0-9a-f]{64}$",
            "description": "A BLAKE3 content hash: `blake3:` then 64 lowercase hex digits."
        })
    }
}

macro_rules! hash_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Blake3Hash);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl FromStr for $name {
            type Err = HashParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                s.parse().map(Self)
            }
        }

        impl From<Blake3Hash> for $name {
            fn from(h: Blake3Hash) -> Self {
                Self(h)
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                <Blake3Hash as schemars::JsonSchema>::schema_name()
            }
            fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <Blake3Hash as schemars::JsonSchema>::json_schema(g)
            }
        }
    };
}

hash_newtype!(
    /// The hash of an experiment spec: BLAKE3 of its canonical JSON (defaults filled, RFC 8785).
    SpecHash
);
hash_newtype!(
    /// The hash of a blob: BLAKE3 of its raw bytes. Blobs are stored and fetched by it.
    BlobHash
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips() {
        let h = Blake3Hash::of(b"glassbox");
        let text = h.to_string();
        assert!(text.starts_with("blake3:"));
        assert_eq!(text.len(), 7 + 64);
        assert_eq!(text.parse::<Blake3Hash>().unwrap(), h);
    }

    #[test]
    fn known_vector() {
        // BLAKE3 of the empty input, from the BLAKE3 reference test vectors.
        assert_eq!(
            Blake3Hash::of(b"").to_string(),
            "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    #[test]
    fn rejects_bad_text_with_reason() {
        for (input, reason) in [
            ("af13", "missing the `blake3:` prefix"),
            ("blake3:af13", "wrong length"),
            (
                "blake3:AF1349B9F5F9A1A6A0404DEA36DCC9499BCB25C9ADC112B7CC9A93CAE41F3262",
                "not lowercase hex",
            ),
            (
                "blake3:zz1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
                "not lowercase hex",
            ),
        ] {
            let e = input.parse::<Blake3Hash>().unwrap_err();
            assert_eq!(e.reason, reason, "{input}");
            assert!(e.to_string().contains("64 lowercase hex"));
        }
    }
}
