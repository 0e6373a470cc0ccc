//! The bot's configuration: a serde struct that the lab's config embeds as a TOML section
//! (e.g. `[github]`). Every key is documented below and has a default where one is safe.
//!
//! ```toml
//! [github]
//! bot_login = "glassbox-bot"                     # the bot's own login; its comments are ignored
//! repositories = ["glassbox-lab/experiments"]    # required: the only repositories it serves
//! webhook_secrets = ["new secret", "old secret"] # any one verifies (rotation); none may be empty
//! max_body_bytes = 10485760                      # larger deliveries get 413
//! maintainers = ["alice", "bob"]                 # may run maintainer commands
//! collaborators_are_maintainers = false          # also allow write/maintain/admin collaborators
//! allow_self_approval = false                    # may a maintainer approve their own proposal?
//! flops_per_second = 1.0e12                      # sustained rate for time estimates
//! dashboard_url = "https://lab.example.org"      # base of links in comments
//! api_base_url = "https://api.github.com"        # GitHub API (tests point it at a fake)
//! ignored_retention_hours = 168                  # `ignored` deliveries are pruned after this
//!
//! [github.auth]                                  # either a token ...
//! kind = "token"
//! token = "ghp_..."
//! # ... or a GitHub App: kind = "app", app_id = 1, installation_id = 2, private_key_pem = "..."
//! # (with an App, deliveries whose `installation.id` is not `installation_id` are ignored)
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
//! Events from a repository not in `repositories` (or, with an App, from another installation)
//! are stored as `ignored` with the reason and never reach the lab ([`BotConfig::scope`]).
//! Secrets (`webhook_secrets`, `auth.token`, `auth.private_key_pem`) are [`Secret`]s: `{:?}` of
//! this config prints `[redacted]` for them.
//!
//! This module only declares and checks the shape; it reads no files and no environment.

use serde::{Deserialize, Serialize};

use crate::ids::{InstallationId, Login, RepoName};
use crate::secret::Secret;

/// Default body cap: 10 MiB (GitHub caps payloads at 25 MB; ours carry an issue and a comment).
pub const DEFAULT_MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// Default age after which `ignored` deliveries are pruned: a week.
pub const DEFAULT_IGNORED_RETENTION_HOURS: u64 = 7 * 24;

/// The bot's section of the lab config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BotConfig {
    /// The bot's own GitHub login (for an App, `<app-slug>[bot]`). Comments by it are ignored,
    /// so the bot never answers itself.
    pub bot_login: Login,
    /// The repositories the bot serves, `owner/name` (required, at least one). Events from any
    /// other repository are acknowledged, stored as `ignored` with the reason, and never reach
    /// the lab; permission lookups use the repository named here, never the payload's.
    pub repositories: Vec<RepoName>,
    /// Webhook secrets; a delivery verifies if its signature matches any one of them, so a
    /// secret is rotated by listing the new one beside the old. At least one, none empty (HMAC
    /// accepts an empty key, so an empty secret would let anyone sign).
    pub webhook_secrets: Vec<Secret>,
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
    /// Hours after which deliveries stored as `ignored` are deleted (they are kept only to
    /// answer a redelivery of the same id as a duplicate and for `glassbox bot deliveries`).
    /// 0 = at the next pruning.
    #[serde(default = "default_ignored_retention_hours")]
    pub ignored_retention_hours: u64,
}

/// How the bot authenticates to GitHub.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GitHubAuth {
    /// A personal access or fine-grained token with issues read/write.
    Token {
        /// The token.
        token: Secret,
    },
    /// A GitHub App; installation tokens are minted and refreshed by octocrab. Deliveries whose
    /// `installation.id` is not `installation_id` are ignored.
    App {
        /// The App's id.
        app_id: u64,
        /// The installation on the lab's repository.
        installation_id: InstallationId,
        /// The App's private key, PEM (RSA).
        private_key_pem: Secret,
    },
}

/// Why a delivery is outside what the bot serves. Stored as the `ignored` delivery's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutOfScope {
    /// The payload names no repository.
    #[error("the payload names no repository")]
    NoRepository,
    /// A repository not in `github.repositories`.
    #[error("repository {0} is not served (github.repositories)")]
    Repository(String),
    /// An App delivery from another installation, or none.
    #[error(
        "installation {got} is not the configured one (github.auth.installation_id = {expected})"
    )]
    Installation {
        /// The payload's `installation.id`, or `none`.
        got: String,
        /// The configured one.
        expected: InstallationId,
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
fn default_ignored_retention_hours() -> u64 {
    DEFAULT_IGNORED_RETENTION_HOURS
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
    /// Checks values serde cannot: positive rates, at least one attempt, at least one
    /// repository, at least one webhook secret and no empty one.
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
        if self.repositories.is_empty() {
            return Err(ConfigError {
                key: "repositories",
                message: "name at least one repository the bot serves, e.g. [\"owner/name\"]"
                    .into(),
            });
        }
        if self.webhook_secrets.is_empty() {
            return Err(ConfigError {
                key: "webhook_secrets",
                message: "at least one secret is needed (the one set on the GitHub webhook)".into(),
            });
        }
        if let Some(i) = self.webhook_secrets.iter().position(Secret::is_blank) {
            return Err(ConfigError {
                key: "webhook_secrets",
                message: format!(
                    "secret {} of {} is empty or only whitespace; such an HMAC key lets anyone sign a delivery",
                    i + 1,
                    self.webhook_secrets.len()
                ),
            });
        }
        Ok(())
    }

    /// The configured repository a delivery is about, when the bot serves it: `repository` (the
    /// payload's `repository.full_name`) must be in `repositories` (compared as GitHub does,
    /// ignoring case) and, with an App, `installation` must be `auth.installation_id`. The
    /// configured spelling is returned, so that later calls never use the payload's.
    pub fn scope(
        &self,
        repository: Option<&RepoName>,
        installation: Option<InstallationId>,
    ) -> Result<&RepoName, OutOfScope> {
        let repo = repository.ok_or(OutOfScope::NoRepository)?;
        let configured = self
            .repositories
            .iter()
            .find(|r| r.same_as(repo))
            .ok_or_else(|| OutOfScope::Repository(repo.to_string()))?;
        if let GitHubAuth::App {
            installation_id, ..
        } = &self.auth
            && installation != Some(*installation_id)
        {
            return Err(OutOfScope::Installation {
                got: installation.map_or_else(|| "none".to_string(), |i| i.to_string()),
                expected: *installation_id,
            });
        }
        Ok(configured)
    }

    /// Whether `login` is on the maintainer allowlist.
    pub fn is_listed_maintainer(&self, login: &Login) -> bool {
        self.maintainers.iter().any(|m| m == login)
    }
}

/// One of the lab's per-proposal limits (`[github.budget]`) that a proposal's cost breaks, with
/// the numbers; [`crate::render::budget_breach`] words it.
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetBreach {
    /// More FLOPs than `budget.max_flops`.
    Flops {
        /// What the proposal needs (training + evaluation).
        needed: f64,
        /// The limit.
        limit: f64,
    },
    /// Longer than `budget.max_wall_seconds` at the configured `flops_per_second`.
    WallTime {
        /// The estimated seconds.
        seconds: f64,
        /// The throughput the estimate assumes.
        flops_per_second: f64,
        /// The limit, in seconds.
        limit: f64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_example_parses() {
        let text = r#"
            bot_login = "glassbox-bot"
            repositories = ["glassbox-lab/experiments"]
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
            "bot_login='b'\nrepositories=['o/r']\nwebhook_secrets=[]\nflops_per_second=0.0\n[auth]\nkind='token'\ntoken='t'",
        )
        .unwrap();
        assert_eq!(c.validate().unwrap_err().key, "flops_per_second");
        c.flops_per_second = 1.0;
        c.budget.max_wall_seconds = Some(-1.0);
        assert_eq!(c.validate().unwrap_err().key, "budget.max_wall_seconds");
    }

    fn minimal(extra: &str) -> Result<BotConfig, String> {
        toml::from_str::<BotConfig>(&format!(
            "bot_login='b'\nflops_per_second=1.0\n{extra}\n[auth]\nkind='token'\ntoken='tok-123'"
        ))
        .map_err(|e| e.to_string())
    }

    #[test]
    fn repositories_are_required_and_parsed() {
        let missing = minimal("webhook_secrets=['s']").unwrap_err();
        assert!(missing.contains("repositories"), "{missing}");
        let bad = minimal("repositories=['noslash']\nwebhook_secrets=['s']").unwrap_err();
        assert!(bad.contains("\"noslash\" is not a repository"), "{bad}");
        let empty = minimal("repositories=[]\nwebhook_secrets=['s']").unwrap();
        assert_eq!(empty.validate().unwrap_err().key, "repositories");
    }

    #[test]
    fn empty_webhook_secrets_are_refused() {
        let c = minimal("repositories=['o/r']\nwebhook_secrets=['s', '']").unwrap();
        let err = c.validate().unwrap_err();
        assert_eq!(err.key, "webhook_secrets");
        assert!(err.message.contains("secret 2 of 2 is empty"), "{err}");
        let none = minimal("repositories=['o/r']\nwebhook_secrets=[]").unwrap();
        assert_eq!(none.validate().unwrap_err().key, "webhook_secrets");
        let blank = minimal("repositories=['o/r']\nwebhook_secrets=['   ']").unwrap();
        let err = blank.validate().unwrap_err();
        assert!(
            err.message
                .contains("secret 1 of 1 is empty or only whitespace"),
            "{err}"
        );
    }

    #[test]
    fn debug_of_a_config_shows_no_secret() {
        let c = minimal("repositories=['o/r']\nwebhook_secrets=['whsec-abc']").unwrap();
        let text = format!("{c:?}");
        assert!(
            !text.contains("whsec-abc") && !text.contains("tok-123"),
            "{text}"
        );
        assert!(text.contains("[redacted]"), "{text}");
        let app: GitHubAuth = toml::from_str(
            "kind='app'\napp_id=1\ninstallation_id=2\nprivate_key_pem='-----BEGIN KEY-----'",
        )
        .unwrap();
        assert!(!format!("{app:?}").contains("BEGIN"), "{app:?}");
    }

    #[test]
    fn scope_is_the_configured_repository_and_installation() {
        let mut c =
            minimal("repositories=['Glassbox-Lab/Experiments']\nwebhook_secrets=['s']").unwrap();
        let ours = RepoName::parse("glassbox-lab/experiments").unwrap();
        let scoped = c.scope(Some(&ours), None).unwrap();
        assert_eq!(scoped.to_string(), "Glassbox-Lab/Experiments");
        let other = RepoName::parse("mallory/experiments").unwrap();
        assert_eq!(
            c.scope(Some(&other), None).unwrap_err().to_string(),
            "repository mallory/experiments is not served (github.repositories)"
        );
        assert_eq!(c.scope(None, None), Err(OutOfScope::NoRepository));
        c.auth = GitHubAuth::App {
            app_id: 1,
            installation_id: InstallationId(42),
            private_key_pem: "k".into(),
        };
        assert!(c.scope(Some(&ours), Some(InstallationId(42))).is_ok());
        let err = c.scope(Some(&ours), Some(InstallationId(7))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "installation 7 is not the configured one (github.auth.installation_id = 42)"
        );
        assert!(c.scope(Some(&ours), None).is_err());
    }
}
