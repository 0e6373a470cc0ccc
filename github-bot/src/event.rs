//! The closed set of webhook events the bot acts on, parsed from a verified delivery.
//!
//! [`WebhookEvent::parse`] takes the `X-GitHub-Event` name and the raw JSON body and yields one
//! variant; anything the bot does not handle becomes [`WebhookEvent::Ignored`] rather than an
//! error, so unknown events and actions are acknowledged and dropped. Only the fields the bot
//! reads are deserialized (the payloads are large and change over time). This module does not
//! verify signatures (that is [`crate::signature`]) and takes no action.

use serde::Deserialize;

use crate::ids::{CommentId, IssueKey, IssueNumber, Login, RepoName};

/// An issue as a webhook shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct IssueData {
    /// Repository and number.
    pub key: IssueKey,
    /// The issue title.
    pub title: String,
    /// The body (empty when GitHub sends `null`).
    pub body: String,
    /// Who filed it.
    pub author: Login,
    /// Its label names.
    pub labels: Vec<String>,
    /// Its web URL.
    pub html_url: String,
    /// Whether it is a pull request (comments on PRs arrive as `issue_comment` too).
    pub is_pull_request: bool,
}

/// A comment as a webhook shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CommentData {
    /// Its id.
    pub id: CommentId,
    /// Its body.
    pub body: String,
    /// Who wrote it.
    pub author: Login,
    /// Whether the author is a bot account (`user.type == "Bot"`).
    pub author_is_bot: bool,
}

/// What happened to an issue.
#[derive(Debug, Clone, PartialEq)]
pub enum IssueAction {
    /// Filed.
    Opened,
    /// Title or body edited.
    Edited,
    /// Reopened.
    Reopened,
    /// A label was added (the name is given).
    Labeled(String),
}

/// What happened to a comment.
#[derive(Debug, Clone, PartialEq)]
pub enum CommentAction {
    /// Posted.
    Created,
    /// Edited; the previous body, when GitHub sends it.
    Edited {
        /// `changes.body.from`.
        previous_body: Option<String>,
    },
}

/// A delivery the bot understands.
#[derive(Debug, Clone, PartialEq)]
pub enum WebhookEvent {
    /// `ping`, sent when the webhook is created.
    Ping {
        /// GitHub's zen line.
        zen: String,
    },
    /// `issues` with an action the bot handles.
    Issue {
        /// The action.
        action: IssueAction,
        /// The issue after the action.
        issue: IssueData,
        /// Who did it.
        sender: Login,
    },
    /// `issue_comment` with an action the bot handles.
    Comment {
        /// The action.
        action: CommentAction,
        /// The issue commented on.
        issue: IssueData,
        /// The comment.
        comment: CommentData,
    },
    /// Anything else: acknowledged and ignored.
    Ignored {
        /// `X-GitHub-Event`.
        event: String,
        /// The payload's `action`, if any.
        action: Option<String>,
    },
}

/// A payload that claims to be an event the bot handles but lacks the fields it needs.
#[derive(Debug, thiserror::Error)]
#[error("malformed `{event}` payload: {message}")]
pub struct EventError {
    /// The event name.
    pub event: String,
    /// What is missing.
    pub message: String,
}

#[derive(Deserialize)]
struct RawUser {
    login: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct RawLabel {
    name: String,
}

#[derive(Deserialize)]
struct RawIssue {
    number: u64,
    #[serde(default)]
    title: String,
    #[serde(default)]
    body: Option<String>,
    user: RawUser,
    #[serde(default)]
    labels: Vec<RawLabel>,
    #[serde(default)]
    html_url: String,
    #[serde(default)]
    pull_request: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawRepo {
    full_name: String,
}

#[derive(Deserialize)]
struct RawComment {
    id: u64,
    #[serde(default)]
    body: Option<String>,
    user: RawUser,
}

#[derive(Deserialize)]
struct RawFrom {
    from: Option<String>,
}

#[derive(Deserialize)]
struct RawChanges {
    body: Option<RawFrom>,
}

#[derive(Deserialize)]
struct RawPayload {
    action: Option<String>,
    issue: Option<RawIssue>,
    comment: Option<RawComment>,
    repository: Option<RawRepo>,
    sender: Option<RawUser>,
    changes: Option<RawChanges>,
    label: Option<RawLabel>,
    zen: Option<String>,
}

/// The `X-GitHub-Event` names that are parsed; every other name is ignored without parsing.
pub const HANDLED_EVENTS: [&str; 3] = ["ping", "issues", "issue_comment"];

impl WebhookEvent {
    /// Parses a verified delivery.
    pub fn parse(event: &str, body: &[u8]) -> Result<Self, EventError> {
        let err = |message: String| EventError {
            event: event.to_string(),
            message,
        };
        if !HANDLED_EVENTS.contains(&event) {
            return Ok(WebhookEvent::Ignored {
                event: event.to_string(),
                action: None,
            });
        }
        let raw: RawPayload = serde_json::from_slice(body).map_err(|e| err(e.to_string()))?;
        let ignored = |action: Option<String>| WebhookEvent::Ignored {
            event: event.to_string(),
            action,
        };
        if event == "ping" {
            return Ok(WebhookEvent::Ping {
                zen: raw.zen.unwrap_or_default(),
            });
        }
        let action = raw.action.clone().unwrap_or_default();
        let issue_action = match (event, action.as_str()) {
            ("issues", "opened") => Some(IssueAction::Opened),
            ("issues", "edited") => Some(IssueAction::Edited),
            ("issues", "reopened") => Some(IssueAction::Reopened),
            ("issues", "labeled") => Some(IssueAction::Labeled(
                raw.label
                    .as_ref()
                    .map(|l| l.name.clone())
                    .unwrap_or_default(),
            )),
            _ => None,
        };
        let comment_action = match (event, action.as_str()) {
            ("issue_comment", "created") => Some(CommentAction::Created),
            ("issue_comment", "edited") => Some(CommentAction::Edited {
                previous_body: raw
                    .changes
                    .as_ref()
                    .and_then(|c| c.body.as_ref())
                    .and_then(|b| b.from.clone()),
            }),
            _ => None,
        };
        if issue_action.is_none() && comment_action.is_none() {
            return Ok(ignored(raw.action));
        }
        let repo = raw
            .repository
            .as_ref()
            .and_then(|r| RepoName::parse(&r.full_name))
            .ok_or_else(|| err("no repository.full_name of the form owner/name".into()))?;
        let raw_issue = raw.issue.ok_or_else(|| err("no issue".into()))?;
        let issue = IssueData {
            key: IssueKey {
                repo,
                number: IssueNumber(raw_issue.number),
            },
            title: raw_issue.title,
            body: raw_issue.body.unwrap_or_default(),
            author: Login(raw_issue.user.login),
            labels: raw_issue.labels.into_iter().map(|l| l.name).collect(),
            html_url: raw_issue.html_url,
            is_pull_request: raw_issue.pull_request.is_some(),
        };
        if let Some(action) = issue_action {
            let sender = raw
                .sender
                .map(|s| Login(s.login))
                .ok_or_else(|| err("no sender".into()))?;
            return Ok(WebhookEvent::Issue {
                action,
                issue,
                sender,
            });
        }
        let c = raw.comment.ok_or_else(|| err("no comment".into()))?;
        Ok(WebhookEvent::Comment {
            action: comment_action.unwrap_or(CommentAction::Created),
            issue,
            comment: CommentData {
                id: CommentId(c.id),
                body: c.body.unwrap_or_default(),
                author_is_bot: c.user.kind.as_deref() == Some("Bot"),
                author: Login(c.user.login),
            },
        })
    }
}
