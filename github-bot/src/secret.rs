//! [`Secret`]: a string that never prints. Webhook secrets, the API token and the App's private
//! key are held in it, so that `{:?}` of a config (in a log line, a panic message, an error)
//! shows `[redacted]` instead of the value.
//!
//! Not here: where secrets come from (the binary reads them from the environment or files) and
//! what they verify ([`crate::signature`]). It does not zero memory on drop.

use std::fmt;

use serde::Deserialize;

/// A secret value. `Debug` prints `[redacted]`; there is no `Display` and no `Serialize`, so the
/// value only leaves through [`Secret::expose`].
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that needs it (HMAC key, auth header, PEM parser).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is empty (an empty webhook secret is a configuration error: HMAC
    /// accepts an empty key, so anyone could sign).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the value is empty or only whitespace (a secret that is a stray space or newline
    /// in a config file is no secret at all).
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl AsRef<[u8]> for Secret {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::from("hunter2");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{:?}", vec![s.clone()]), "[[redacted]]");
        assert_eq!(s.expose(), "hunter2");
    }
}
