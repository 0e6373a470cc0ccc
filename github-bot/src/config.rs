//! The bot's configuration: a serde struct that the lab's config embeds as a TOML section
//! (e.g. `[github]`). Every key is documented below and has a default where one is safe.
//!
//! ```toml
//! [github]
//! bot_login = "glassbox-bot"                     # the bot's own login; its comments are ignored
//! webhook_secrets = ["new secret", "old secret"] # any one verifies (rotation)
//! max_body_bytes = 10485760                      # larger deliveries get 413
//! maintainers = ["alice", "bob"]                 # may run maintainer commands
//! collaborators_are_maintainers = false          # also allow write/maintain/admin collaborators
//! allow_self_approval = false                    # may a maintainer approve their own proposal?
//! flops_per_second = 1.0e12                      # sustained rate for time estimates
//! dashboard_url = "https://lab.example.org"      # base of links in comments
//! api_base_url = "https://api.github.com"        # GitHub API (tests point it at a fake)
//!
//! [github.auth]                                  # either a token ...
//! kind = "token"
//! token = "ghp_..."
//! # ... or a GitHub App: kind = "app", app_id = 1, installation_id = 2, private_key_pem = "..."
//!
//! [github.budget]                                # per-proposal limits; left out = no limit
//! max_flops = 1.0e18
//! max_wall_seconds = 86400
//! max_queued_per_author = 3
//!
//! [github.retry]                                 # GitHub API retries
//! max_attempts = 5
//! base_backoff_ms = 500
//! max_wait_seconds = 60
//! ```
//!
//! This module only declares and checks the shape; it reads no files and no environment.

use serde::{Deserialize, Serialize};

use crate::ids::Login;

/// Default body cap: 10 MiB (GitHub caps payloads at 25 MB; ours carry an issue and a comment).
pub const DEFAULT_MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// The bot's section of the lab config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BotConfig {
    /// The bot's own GitHub login (for an App, `<app-slug>[bot]`). Comments by it are ignored,
    /// so the bot never answers itself.
    pub bot_login: Login,
    /// Webhook secrets; a delivery verifies if its signature matches any one of them, so a
    /// secret is rotated by listing the new one beside the old. Empty = every delivery is 401.
    pub webhook_secrets: Vec<String>,
    /// Largest webhook body accepted, in bytes; larger ones are answered 413 unread.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Logins allowed to run maintainer commands (compared case-insensitively).
    #[serde(default)]
    pub maintainers: Vec<Login>,
    /// Also allow repository collaborators whose permission (checked through the API, not the
    /// webhook's `author_association`) is write, maintain or admin. A failed lookup denies.
    #[serde(default)]
    pub collaborators_are_maintainers: bool,
    /// Whether a maintainer may `/approve` a proposal they filed themselves.
    #[serde(default)]
    pub allow_self_approval: bool,
    /// Sustained FLOP/s of the lab's hardware, used to turn the cost model's FLOPs into an
    /// estimated time in validation comments and for `budget.max_wall_seconds`.
    pub flops_per_second: f64,
    /// Base URL of the dashboard; comments link to `<dashboard_url>/experiments/<id>` and
    /// `<dashboard_url>/runs/<run>`. Empty = no links.
    #[serde(default)]
    pub dashboard_url: String,
    /// GitHub API base URL.
    #[serde(default = "default_api_base_url")]
    pub api_base_url: String,
    /// How the bot authenticates to GitHub.
    pub auth: GitHubAuth,
    /// Per-proposal budgets and per-author quotas.
    #[serde(default)]
    pub budget: BudgetConfig,
    /// Retries of GitHub API calls.
    #[serde(default)]
    pub retry: RetryConfig,
}

/// How the bot authenticates to GitHub.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GitHubAuth {
    /// A personal access or fine-grained token with issues read/write.
    Token {
        /// The token.
        token: String,
    },
    /// A GitHub App; installation tokens are minted and refreshed by octocrab.
    App {
        /// The App's id.
        app_id: u64,
        /// The installation on the lab's repository.
        installation_id: u64,
        /// The App's private key, PEM (RSA).
        private_key_pem: String,
    },
}

/// Per-proposal limits. `None` = no limit from the bot (the spec's own budget still applies).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// Most FLOPs (training + evaluation, as [`glassbox_schemas::estimate`] counts) a single
    /// proposal may cost.
    #[serde(default)]
    pub max_flops: Option<f64>,
    /// Most estimated wall-clock seconds (FLOPs / `flops_per_second`) a proposal may take.
    #[serde(default)]
    pub max_wall_seconds: Option<f64>,
    /// Most approved-and-queued proposals one author may have at once; `/approve` beyond it
    /// is refused with the numbers.
    #[serde(default)]
    pub max_queued_per_author: Option<u32>,
}

/// Retries of GitHub API calls: 5xx and network errors back off exponentially
/// (`base_backoff_ms * 2^attempt`); 403/429 with `retry-after` or an exhausted
/// `x-ratelimit-remaining` wait as told (at most `max_wait_seconds`); other 4xx never retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Attempts per call, the first included.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// First backoff, in milliseconds.
    #[serde(default = "default_base_backoff_ms")]
    pub base_backoff_ms: u64,
    /// Longest single wait, in seconds (rate-limit resets further away fail the call; the
    /// event stays queued and is retried later).
    #[serde(default = "default_max_wait_seconds")]
    pub max_wait_seconds: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: default_max_attempts(),
            base_backoff_ms: default_base_backoff_ms(),
            max_wait_seconds: default_max_wait_seconds(),
        }
    }
}

fn default_max_body_bytes() -> usize {
    DEFAULT_MAX_BODY_BYTES
}
fn default_api_base_url() -> String {
    "https://api.github.com".to_string()
}
fn default_max_attempts() -> u32 {
    5
}
fn default_base_backoff_ms() -> u64 {
    500
}
fn default_max_wait_seconds() -> u64 {
    60
}

/// A configuration mistake, naming the key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("github bot config: `{key}`: {message}")]
pub struct ConfigError {
    /// The key, e.g. `flops_per_second`.
    pub key: &'static str,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl BotConfig {
    /// Checks values serde cannot: positive rates, at least one attempt.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.flops_per_second.is_finite() && self.flops_per_second > 0.0) {
            return Err(ConfigError {
                key: "flops_per_second",
                message: format!("{} must be a positive number", self.flops_per_second),
            });
        }
        if self.retry.max_attempts == 0 {
            return Err(ConfigError {
                key: "retry.max_attempts",
                message: "must be at least 1".into(),
            });
        }
        if self.max_body_bytes == 0 {
            return Err(ConfigError {
                key: "max_body_bytes",
                message: "must be at least 1".into(),
            });
        }
        for (key, v) in [
            ("budget.max_flops", self.budget.max_flops),
            ("budget.max_wall_seconds", self.budget.max_wall_seconds),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(ConfigError {
                    key,
                    message: format!("{v} must be a positive number"),
                });
            }
        }
        Ok(())
    }

    /// Whether `login` is on the maintainer allowlist.
    pub fn is_listed_maintainer(&self, login: &Login) -> bool {
        self.maintainers.iter().any(|m| m == login)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_example_parses() {
        let text = r#"
            bot_login = "glassbox-bot"
            webhook_secrets = ["s1", "s2"]
            maintainers = ["Alice"]
            flops_per_second = 1.0e12
            [auth]
            kind = "token"
            token = "t"
            [budget]
            max_flops = 1.0e18
            max_queued_per_author = 3
        "#;
        let c: BotConfig = toml::from_str(text).unwrap();
        assert_eq!(c.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
        assert!(c.is_listed_maintainer(&Login::new("alice")));
        assert_eq!(c.budget.max_queued_per_author, Some(3));
        assert_eq!(c.retry.max_attempts, 5);
        c.validate().unwrap();
        let bad: Result<BotConfig, _> = toml::from_str(&text.replace("maintainers", "maintainerz"));
        assert!(bad.unwrap_err().to_string().contains("maintainerz"));
    }

    #[test]
    fn validate_names_the_key() {
        let mut c: BotConfig = toml::from_str(
            "bot_login='b'\nwebhook_secrets=[]\nflops_per_second=0.0\n[auth]\nkind='token'\ntoken='t'",
        )
        .unwrap();
        assert_eq!(c.validate().unwrap_err().key, "flops_per_second");
        c.flops_per_second = 1.0;
        c.budget.max_wall_seconds = Some(-1.0);
        assert_eq!(c.validate().unwrap_err().key, "budget.max_wall_seconds");
    }
}
