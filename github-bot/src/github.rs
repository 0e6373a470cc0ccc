//! GitHub access through octocrab: the few REST calls the bot makes, with retries.
//!
//! Calls go through octocrab's raw request methods so the bot sees status and headers and can
//! apply its own policy ([`crate::config::RetryConfig`]):
//! - 5xx and transport errors: retry with exponential backoff (`base * 2^attempt`);
//! - 403/429 with `retry-after`, or with `x-ratelimit-remaining: 0` and `x-ratelimit-reset`:
//!   wait as GitHub says (at most `max_wait_seconds`), then retry;
//! - any other 4xx: fail at once, never retried (the request itself is wrong); a 403 that is
//!   not a rate limit (no `retry-after`, remaining quota) is a refusal, not transient.
//!
//! A comment created with a 2xx whose body has no id is still created: [`GitHub::create_comment`]
//! answers `Ok(None)` rather than an error, so the caller never posts it again.
//!
//! Authentication is a token or a GitHub App installation (octocrab mints and refreshes the
//! installation tokens). This module does not decide what to say; it only says it.

use std::time::Duration;

use http::{Method, StatusCode};
use octocrab::Octocrab;
use serde_json::{Value, json};

use crate::config::{BotConfig, GitHubAuth, RetryConfig};
use crate::ids::{CommentId, IssueNumber, Login, RepoName};

/// Comments asked for per page when listing an issue's comments (GitHub's maximum).
const COMMENTS_PER_PAGE: usize = 100;

/// Most pages read when looking for the bot's comment on an issue (10,000 comments).
const MAX_COMMENT_PAGES: usize = 100;

/// A GitHub API failure, after retries.
#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    /// GitHub answered with a status the bot does not retry (or retries ran out).
    #[error("GitHub answered {status} to {method} {route}: {message}")]
    Status {
        /// The method.
        method: Method,
        /// The route.
        route: String,
        /// The last status.
        status: StatusCode,
        /// GitHub's message, if any.
        message: String,
        /// Whether GitHub said to wait (`retry-after`, or an exhausted rate limit): a 403 or
        /// 429 that is a rate limit rather than a refusal.
        rate_limited: bool,
    },
    /// The request could not be sent or the response not read.
    #[error("GitHub request {method} {route} failed: {message}")]
    Transport {
        /// The method.
        method: Method,
        /// The route.
        route: String,
        /// What failed.
        message: String,
    },
    /// The client could not be built from the config.
    #[error("cannot build the GitHub client: {0}")]
    Setup(String),
}

impl GitHubError {
    /// Whether retrying the whole event later could help (5xx, rate limits, transport).
    pub fn is_transient(&self) -> bool {
        match self {
            GitHubError::Status {
                status,
                rate_limited,
                ..
            } => {
                status.is_server_error()
                    || *status == StatusCode::TOO_MANY_REQUESTS
                    || (*status == StatusCode::FORBIDDEN && *rate_limited)
            }
            GitHubError::Transport { .. } => true,
            GitHubError::Setup(_) => false,
        }
    }
}

/// The bot's GitHub client.
#[derive(Debug, Clone)]
pub struct GitHub {
    client: Octocrab,
    retry: RetryConfig,
}

/// What the collaborator permission endpoint says about a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollaboratorPermission {
    /// `admin`, `write`, `read` or `none`.
    pub permission: String,
    /// `admin`, `maintain`, `write`, `triage`, `read` (or a custom role name).
    pub role_name: String,
}

/// One comment on an issue, as listing them shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueComment {
    /// Its id.
    pub id: CommentId,
    /// Who wrote it.
    pub author: Login,
    /// Its body.
    pub body: String,
}

impl CollaboratorPermission {
    /// Write, maintain or admin.
    pub fn can_write(&self) -> bool {
        matches!(self.permission.as_str(), "admin" | "write")
            || matches!(self.role_name.as_str(), "admin" | "maintain" | "write")
    }
}

impl GitHub {
    /// Wraps an octocrab client (tests build one with `base_uri` pointing at a fake).
    pub fn new(client: Octocrab, retry: RetryConfig) -> Self {
        Self { client, retry }
    }

    /// Builds the client from the config: token or App installation.
    pub fn from_config(config: &BotConfig) -> Result<Self, GitHubError> {
        let setup = |e: octocrab::Error| GitHubError::Setup(e.to_string());
        let builder = Octocrab::builder()
            .base_uri(config.api_base_url.as_str())
            .map_err(setup)?;
        let client = match &config.auth {
            GitHubAuth::Token { token } => {
                builder.personal_token(token.expose().to_string()).build()
            }
            GitHubAuth::App {
                app_id,
                installation_id,
                private_key_pem,
            } => {
                let key = octocrab::EncodingKey::from_rsa_pem(private_key_pem.expose().as_bytes())
                    .map_err(|e| GitHubError::Setup(format!("auth.private_key_pem: {e}")))?;
                builder
                    .app(octocrab::models::AppId(*app_id), key)
                    .build()
                    .and_then(|app| {
                        app.installation(octocrab::models::InstallationId(installation_id.0))
                    })
            }
        }
        .map_err(setup)?;
        Ok(Self::new(client, config.retry.clone()))
    }

    /// One call with the retry policy; returns the JSON body (`Null` when empty).
    async fn call(
        &self,
        method: Method,
        route: &str,
        body: Option<&Value>,
    ) -> Result<Value, GitHubError> {
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let last = attempt >= self.retry.max_attempts;
            let transport = |e: octocrab::Error| GitHubError::Transport {
                method: method.clone(),
                route: route.to_string(),
                message: e.to_string(),
            };
            let sent = match method {
                Method::GET => self.client._get(route).await,
                Method::POST => self.client._post(route, body).await,
                Method::PATCH => self.client._patch(route, body).await,
                Method::DELETE => self.client._delete(route, body).await,
                _ => self.client._put(route, body).await,
            };
            let response = match sent {
                Ok(r) => r,
                Err(e) if !last => {
                    tracing::warn!(%route, error = %e, attempt, "GitHub transport error; retrying");
                    tokio::time::sleep(self.backoff(attempt)).await;
                    continue;
                }
                Err(e) => return Err(transport(e)),
            };
            let status = response.status();
            let wait = rate_limit_wait(&response);
            let text = self
                .client
                .body_to_string(response)
                .await
                .map_err(transport)?;
            if status.is_success() {
                return Ok(if text.trim().is_empty() {
                    Value::Null
                } else {
                    serde_json::from_str(&text).unwrap_or(Value::String(text))
                });
            }
            let error = GitHubError::Status {
                method: method.clone(),
                route: route.to_string(),
                status,
                message: serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v.get("message").and_then(Value::as_str).map(String::from))
                    .unwrap_or_else(|| text.chars().take(200).collect()),
                rate_limited: wait.is_some(),
            };
            let max_wait = Duration::from_secs(self.retry.max_wait_seconds);
            let delay = if status.is_server_error() {
                Some(self.backoff(attempt))
            } else if (status == StatusCode::FORBIDDEN || status == StatusCode::TOO_MANY_REQUESTS)
                && let Some(w) = wait
            {
                // A rate limit: wait as told, unless that is longer than we are willing to.
                (w <= max_wait).then_some(w)
            } else {
                None
            };
            match delay {
                Some(d) if !last => {
                    tracing::warn!(%route, %status, attempt, ?d, "GitHub call failed; retrying");
                    tokio::time::sleep(d).await;
                }
                _ => return Err(error),
            }
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let ms = self
            .retry
            .base_backoff_ms
            .saturating_mul(1u64 << attempt.saturating_sub(1).min(16));
        Duration::from_millis(ms).min(Duration::from_secs(self.retry.max_wait_seconds.max(1)))
    }

    /// Posts a comment; returns its id, or `None` when GitHub answered 2xx without one (the
    /// comment exists; posting again would make a second).
    pub async fn create_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        body: &str,
    ) -> Result<Option<CommentId>, GitHubError> {
        let route = format!(
            "/repos/{}/{}/issues/{issue}/comments",
            repo.owner, repo.name
        );
        let v = self
            .call(Method::POST, &route, Some(&json!({ "body": body })))
            .await?;
        let id = v.get("id").and_then(Value::as_u64).map(CommentId);
        if id.is_none() {
            tracing::warn!(%route, "GitHub created a comment but sent no id; not posting again");
        }
        Ok(id)
    }

    /// Every comment on an issue, oldest first (`GET .../issues/{n}/comments`, page by page, at
    /// most [`MAX_COMMENT_PAGES`] pages).
    pub async fn list_comments(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
    ) -> Result<Vec<IssueComment>, GitHubError> {
        let mut out = Vec::new();
        for page in 1..=MAX_COMMENT_PAGES {
            let route = format!(
                "/repos/{}/{}/issues/{issue}/comments?per_page={COMMENTS_PER_PAGE}&page={page}",
                repo.owner, repo.name
            );
            let v = self.call(Method::GET, &route, None).await?;
            let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
            for c in items {
                let (Some(id), Some(login)) = (
                    c.get("id").and_then(Value::as_u64),
                    c.pointer("/user/login").and_then(Value::as_str),
                ) else {
                    continue;
                };
                out.push(IssueComment {
                    id: CommentId(id),
                    author: Login::new(login),
                    body: c
                        .get("body")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                });
            }
            if items.len() < COMMENTS_PER_PAGE {
                break;
            }
        }
        Ok(out)
    }

    /// Replaces a comment's body.
    pub async fn update_comment(
        &self,
        repo: &RepoName,
        comment: CommentId,
        body: &str,
    ) -> Result<(), GitHubError> {
        let route = format!(
            "/repos/{}/{}/issues/comments/{comment}",
            repo.owner, repo.name
        );
        self.call(Method::PATCH, &route, Some(&json!({ "body": body })))
            .await
            .map(drop)
    }

    /// Adds labels to an issue (existing ones are kept).
    pub async fn add_labels(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        labels: &[&str],
    ) -> Result<(), GitHubError> {
        let route = format!("/repos/{}/{}/issues/{issue}/labels", repo.owner, repo.name);
        self.call(Method::POST, &route, Some(&json!({ "labels": labels })))
            .await
            .map(drop)
    }

    /// Removes a label; a label that is not there (404) is not an error.
    pub async fn remove_label(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        label: &str,
    ) -> Result<(), GitHubError> {
        let route = format!(
            "/repos/{}/{}/issues/{issue}/labels/{}",
            repo.owner,
            repo.name,
            percent_encode_segment(label)
        );
        match self.call(Method::DELETE, &route, None).await {
            Err(GitHubError::Status { status, .. }) if status == StatusCode::NOT_FOUND => Ok(()),
            other => other.map(drop),
        }
    }

    /// `GET /repos/{owner}/{repo}/collaborators/{user}/permission`.
    pub async fn collaborator_permission(
        &self,
        repo: &RepoName,
        user: &Login,
    ) -> Result<CollaboratorPermission, GitHubError> {
        let route = format!(
            "/repos/{}/{}/collaborators/{}/permission",
            repo.owner,
            repo.name,
            percent_encode_segment(user.as_str())
        );
        let v = self.call(Method::GET, &route, None).await?;
        let field = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or("none")
                .to_string()
        };
        Ok(CollaboratorPermission {
            permission: field("permission"),
            role_name: field("role_name"),
        })
    }
}

/// How long GitHub asks us to wait, from `retry-after` (seconds) or, when the rate limit is
/// exhausted, `x-ratelimit-reset` (epoch seconds).
fn rate_limit_wait<B>(response: &http::Response<B>) -> Option<Duration> {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    if let Some(secs) = header("retry-after") {
        return Some(Duration::from_secs(secs));
    }
    if header("x-ratelimit-remaining") == Some(0)
        && let Some(reset) = header("x-ratelimit-reset")
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        return Some(Duration::from_secs(reset.saturating_sub(now)));
    }
    None
}

/// Percent-encodes a path segment (labels may contain spaces; logins cannot, but a forged
/// payload could try `../`).
fn percent_encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(auth: &str) -> BotConfig {
        toml::from_str(&format!(
            "bot_login = 'b'\nrepositories = ['o/r']\nwebhook_secrets = ['s']\nflops_per_second = 1.0\napi_base_url = 'http://127.0.0.1:9'\n[auth]\n{auth}"
        ))
        .unwrap()
    }

    #[tokio::test]
    async fn clients_build_from_token_and_app_configs() {
        assert!(GitHub::from_config(&config("kind = 'token'\ntoken = 't'")).is_ok());
        let err = GitHub::from_config(&config(
            "kind = 'app'\napp_id = 1\ninstallation_id = 2\nprivate_key_pem = 'not a key'",
        ))
        .unwrap_err();
        assert!(
            matches!(&err, GitHubError::Setup(m) if m.contains("auth.private_key_pem")),
            "{err}"
        );
        assert!(!err.is_transient());
    }

    #[test]
    fn segments_are_encoded() {
        assert_eq!(percent_encode_segment("negative-result"), "negative-result");
        assert_eq!(percent_encode_segment("a b/../c"), "a%20b%2F..%2Fc");
    }

    #[test]
    fn retry_after_and_reset_headers_are_read() {
        let r = http::Response::builder()
            .header("retry-after", "7")
            .body(())
            .unwrap();
        assert_eq!(rate_limit_wait(&r), Some(Duration::from_secs(7)));
        let r = http::Response::builder()
            .header("x-ratelimit-remaining", "5")
            .header("x-ratelimit-reset", "1")
            .body(())
            .unwrap();
        assert_eq!(rate_limit_wait(&r), None);
        let r = http::Response::builder()
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", "1")
            .body(())
            .unwrap();
        assert_eq!(rate_limit_wait(&r), Some(Duration::ZERO));
    }
}
