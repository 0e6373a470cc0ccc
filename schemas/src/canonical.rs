//! Canonical bytes and hashes: RFC 8785 (JCS) JSON, then BLAKE3.
//!
//! Every hash of structured data in glassbox — spec hashes, ledger entries — is taken over the
//! JCS form, so that key order, whitespace and number spelling cannot change a hash. JCS is done
//! by the `serde_jcs` crate (ECMAScript number formatting via `ryu-js`); this module only fixes
//! the recipe. Defaults are filled before hashing because serde fills them while parsing: the
//! typed value, not the text, is what gets hashed.

use serde::Serialize;

use crate::hash::{Blake3Hash, SpecHash};
use crate::spec::ExperimentSpec;

/// Why a value has no canonical form.
#[derive(Debug, thiserror::Error)]
#[error("value has no canonical JSON form: {0}")]
pub struct CanonicalError(#[from] serde_json::Error);

/// RFC 8785 canonical JSON bytes of any serializable value. Fails on non-finite floats.
pub fn canonical_json<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    Ok(serde_jcs::to_vec(value)?)
}

/// The canonical JSON of `value` as one line of text (a JSON Lines record: a suite item).
pub fn json_line<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalError> {
    // JCS output is UTF-8 JSON: the conversion cannot fail.
    Ok(String::from_utf8_lossy(&canonical_json(value)?).into_owned())
}

/// BLAKE3 of the canonical JSON of `value`.
pub fn canonical_hash<T: Serialize + ?Sized>(value: &T) -> Result<Blake3Hash, CanonicalError> {
    Ok(Blake3Hash::of(&canonical_json(value)?))
}

/// The spec's hash: BLAKE3 of its canonical JSON with every default filled.
///
/// A validated spec always has a canonical form (its floats are finite: the schema requires
/// numbers and TOML's `nan`/`inf` become `null`), so this cannot fail for one.
pub fn spec_hash(spec: &ExperimentSpec) -> Result<SpecHash, CanonicalError> {
    canonical_hash(spec).map(SpecHash)
}

/// The canonical JSON of a spec (the bytes stored as the spec blob).
pub fn spec_canonical_json(spec: &ExperimentSpec) -> Result<Vec<u8>, CanonicalError> {
    canonical_json(spec)
}
