//! `X-Hub-Signature-256` verification: HMAC-SHA256 of the raw body under a shared secret.
//!
//! GitHub sends `sha256=<64 lowercase hex>`. The check is constant-time
//! ([`hmac::Mac::verify_slice`]) and tries every configured secret, so a secret can be rotated by
//! configuring the new one beside the old one, switching GitHub over, then removing the old one.
//! This module does not read headers or bodies from HTTP; it only judges bytes.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header GitHub signs with.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// Why a signature was not accepted (the HTTP layer answers 401 for every variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No `X-Hub-Signature-256` header.
    #[error("missing X-Hub-Signature-256 header")]
    Missing,
    /// The header is not `sha256=` followed by 64 hex digits.
    #[error("malformed X-Hub-Signature-256 header; expected `sha256=<64 hex digits>`")]
    Malformed,
    /// Well-formed, but no configured secret produces it.
    #[error("X-Hub-Signature-256 does not match the body under any configured secret")]
    Mismatch,
    /// The bot has no secret configured, so nothing can be verified.
    #[error("no webhook secret is configured; every delivery is refused")]
    NoSecret,
}

/// The header value GitHub would send for `body` under `secret`: `sha256=<hex>`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail here.
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks `header` (the raw header value, if any) against `body` under each of `secrets`.
pub fn verify<S: AsRef<[u8]>>(
    secrets: &[S],
    header: Option<&[u8]>,
    body: &[u8],
) -> Result<(), SignatureError> {
    if secrets.is_empty() {
        return Err(SignatureError::NoSecret);
    }
    let header = header.ok_or(SignatureError::Missing)?;
    let hex_part = header
        .strip_prefix(b"sha256=")
        .ok_or(SignatureError::Malformed)?;
    if hex_part.len() != 64 {
        return Err(SignatureError::Malformed);
    }
    let mut expected = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut expected).map_err(|_| SignatureError::Malformed)?;
    for secret in secrets {
        let Ok(mut mac) = HmacSha256::new_from_slice(secret.as_ref()) else {
            continue;
        };
        mac.update(body);
        if mac.verify_slice(&expected).is_ok() {
            return Ok(());
        }
    }
    Err(SignatureError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's published test vector ("Validating webhook deliveries").
    const GH_SECRET: &str = "It's a Secret to Everybody";
    const GH_PAYLOAD: &str = "Hello, World!";
    const GH_SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn github_published_vector_signs_and_verifies() {
        assert_eq!(
            sign(GH_SECRET.as_bytes(), GH_PAYLOAD.as_bytes()),
            GH_SIGNATURE
        );
        assert_eq!(
            verify(
                &[GH_SECRET],
                Some(GH_SIGNATURE.as_bytes()),
                GH_PAYLOAD.as_bytes()
            ),
            Ok(())
        );
    }

    #[test]
    fn any_configured_secret_verifies_for_rotation() {
        let secrets = ["old secret", GH_SECRET];
        assert_eq!(
            verify(
                &secrets,
                Some(GH_SIGNATURE.as_bytes()),
                GH_PAYLOAD.as_bytes()
            ),
            Ok(())
        );
    }

    #[test]
    fn wrong_body_secret_or_header_is_refused() {
        let sig = GH_SIGNATURE.as_bytes();
        assert_eq!(
            verify(&[GH_SECRET], Some(sig), b"Hello, World?"),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&["other"], Some(sig), GH_PAYLOAD.as_bytes()),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&[GH_SECRET], None, GH_PAYLOAD.as_bytes()),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(&[GH_SECRET], Some(&sig[7..]), GH_PAYLOAD.as_bytes()),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify(&[GH_SECRET], Some(b"sha256=zz"), GH_PAYLOAD.as_bytes()),
            Err(SignatureError::Malformed)
        );
        let none: [&str; 0] = [];
        assert_eq!(
            verify(&none, Some(sig), GH_PAYLOAD.as_bytes()),
            Err(SignatureError::NoSecret)
        );
    }
}
