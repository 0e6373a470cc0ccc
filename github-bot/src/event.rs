//! The closed set of webhook events the bot acts on, parsed from a verified delivery.
//!
//! Parsing has two stages. [`Envelope::parse`] reads only what decides whether the bot handles a
//! delivery at all (the action, the label of a label event, the repository and the App
//! installation) from loosely typed JSON, so an action the bot ignores is ignored even when a
//! field it never reads has drifted from what we expect. [`WebhookEvent::parse`] then reads the
//! handled ones strictly, into one variant; anything else becomes [`WebhookEvent::Ignored`]
//! with the reason, rather than an error. Only the fields the bot reads are deserialized (the
//! payloads are large and change over time). This module does not verify signatures (that is
//! [`crate::signature`]), does not decide which repositories are served
//! ([`crate::config::BotConfig::scope`]) and takes no action.

use serde::Deserialize;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::ids::{CommentId, InstallationId, IssueKey, IssueNumber, Login, RepoName};
use crate::labels::EXPERIMENT_LABEL;

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
    /// GitHub's `updated_at` of the issue, when the payload has it: the order of issue events
    /// (an older one is never applied over a newer one).
    pub updated_at: Option<OffsetDateTime>,
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
    /// A label was removed (the name is given).
    Unlabeled(String),
    /// Closed.
    Closed,
    /// Deleted.
    Deleted,
    /// Moved to another repository.
    Transferred,
}

impl IssueAction {
    /// The action as GitHub names it.
    pub fn name(&self) -> &'static str {
        match self {
            IssueAction::Opened => "opened",
            IssueAction::Edited => "edited",
            IssueAction::Reopened => "reopened",
            IssueAction::Labeled(_) => "labeled",
            IssueAction::Unlabeled(_) => "unlabeled",
            IssueAction::Closed => "closed",
            IssueAction::Deleted => "deleted",
            IssueAction::Transferred => "transferred",
        }
    }
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
        /// `installation.id`, present when delivered to a GitHub App.
        installation: Option<InstallationId>,
    },
    /// `issue_comment` with an action the bot handles.
    Comment {
        /// The action.
        action: CommentAction,
        /// The issue commented on.
        issue: IssueData,
        /// The comment.
        comment: CommentData,
        /// Who did it: the author when it was created, whoever edited it when it was edited. The
        /// actor of every command in it.
        sender: Login,
        /// Whether the sender is a bot account (`sender.type == "Bot"`).
        sender_is_bot: bool,
        /// `installation.id`, present when delivered to a GitHub App.
        installation: Option<InstallationId>,
    },
    /// Anything else: acknowledged and ignored.
    Ignored {
        /// `X-GitHub-Event`.
        event: String,
        /// The payload's `action`, if any.
        action: Option<String>,
        /// Why it is ignored, for the delivery's record.
        reason: String,
    },
}

/// What decides whether a delivery is handled, read leniently (a missing or odd field is
/// `None`, never an error): the first stage of parsing.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// `X-GitHub-Event`.
    pub event: String,
    /// `action`.
    pub action: Option<String>,
    /// `label.name`, for label events.
    pub label: Option<String>,
    /// `repository.full_name`, when it is `owner/name`.
    pub repository: Option<RepoName>,
    /// `installation.id`, present when delivered to a GitHub App.
    pub installation: Option<InstallationId>,
}

impl Envelope {
    /// Reads the envelope; fails only when the body is not JSON.
    pub fn parse(event: &str, body: &[u8]) -> Result<Self, EventError> {
        let body = crate::json_escapes::without_lone_surrogates(body);
        let v: Value = serde_json::from_slice(&body).map_err(|e| EventError {
            event: event.to_string(),
            message: format!("the body is not JSON: {e}"),
        })?;
        let text = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        Ok(Self {
            event: event.to_string(),
            action: text("/action"),
            label: text("/label/name"),
            repository: v
                .pointer("/repository/full_name")
                .and_then(Value::as_str)
                .and_then(RepoName::parse),
            installation: v
                .pointer("/installation/id")
                .and_then(Value::as_u64)
                .map(InstallationId),
        })
    }

    /// Why the bot does not handle this delivery, or `None` when it does. Handled: `ping`;
    /// `issues` opened, edited, reopened, closed, deleted, transferred, and labeled or
    /// unlabeled with the experiment label; `issue_comment` created and edited.
    pub fn unhandled(&self) -> Option<String> {
        let action = self.action.as_deref().unwrap_or("");
        let handled = match (self.event.as_str(), action) {
            ("ping", _) => true,
            ("issues", "opened" | "edited" | "reopened" | "closed" | "deleted" | "transferred") => {
                true
            }
            ("issues", "labeled" | "unlabeled") => {
                if self.label.as_deref() != Some(EXPERIMENT_LABEL) {
                    return Some(format!(
                        "`issues.{action}` of label {:?}, not `{EXPERIMENT_LABEL}`",
                        self.label.as_deref().unwrap_or("")
                    ));
                }
                true
            }
            ("issue_comment", "created" | "edited") => true,
            _ => false,
        };
        if handled {
            None
        } else if HANDLED_EVENTS.contains(&self.event.as_str()) {
            Some(format!("`{}.{action}` is not handled", self.event))
        } else {
            Some(format!("event `{}` is not handled", self.event))
        }
    }
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
    updated_at: Option<String>,
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
struct RawInstallation {
    id: u64,
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
    installation: Option<RawInstallation>,
}

#[derive(Deserialize)]
struct RawPing {
    zen: Option<String>,
}

/// The `X-GitHub-Event` names that are parsed; every other name is ignored without parsing.
pub const HANDLED_EVENTS: [&str; 3] = ["ping", "issues", "issue_comment"];

impl WebhookEvent {
    /// Parses a verified delivery: unhandled events and actions are [`WebhookEvent::Ignored`]
    /// after the lenient first stage, handled ones are read strictly.
    pub fn parse(event: &str, body: &[u8]) -> Result<Self, EventError> {
        let err = |message: String| EventError {
            event: event.to_string(),
            message,
        };
        if !HANDLED_EVENTS.contains(&event) {
            return Ok(WebhookEvent::Ignored {
                event: event.to_string(),
                action: None,
                reason: format!("event `{event}` is not handled"),
            });
        }
        let body = &*crate::json_escapes::without_lone_surrogates(body);
        let envelope = Envelope::parse(event, body)?;
        if let Some(reason) = envelope.unhandled() {
            return Ok(WebhookEvent::Ignored {
                event: event.to_string(),
                action: envelope.action,
                reason,
            });
        }
        if event == "ping" {
            let raw: RawPing = serde_json::from_slice(body).map_err(|e| err(e.to_string()))?;
            return Ok(WebhookEvent::Ping {
                zen: raw.zen.unwrap_or_default(),
            });
        }
        let raw: RawPayload = serde_json::from_slice(body).map_err(|e| err(e.to_string()))?;
        let action = raw.action.clone().unwrap_or_default();
        let label = || {
            raw.label
                .as_ref()
                .map(|l| l.name.clone())
                .unwrap_or_default()
        };
        let issue_action = match (event, action.as_str()) {
            ("issues", "opened") => Some(IssueAction::Opened),
            ("issues", "edited") => Some(IssueAction::Edited),
            ("issues", "reopened") => Some(IssueAction::Reopened),
            ("issues", "labeled") => Some(IssueAction::Labeled(label())),
            ("issues", "unlabeled") => Some(IssueAction::Unlabeled(label())),
            ("issues", "closed") => Some(IssueAction::Closed),
            ("issues", "deleted") => Some(IssueAction::Deleted),
            ("issues", "transferred") => Some(IssueAction::Transferred),
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
            // `Envelope::unhandled` and the two tables above name the same actions.
            return Ok(WebhookEvent::Ignored {
                event: event.to_string(),
                reason: format!("`{event}.{action}` is not handled"),
                action: raw.action,
            });
        }
        let repo = raw
            .repository
            .as_ref()
            .and_then(|r| RepoName::parse(&r.full_name))
            .ok_or_else(|| err("no repository.full_name of the form owner/name".into()))?;
        let installation = raw.installation.map(|i| InstallationId(i.id));
        let raw_issue = raw.issue.ok_or_else(|| err("no issue".into()))?;
        let updated_at = raw_issue
            .updated_at
            .as_deref()
            .map(|t| {
                OffsetDateTime::parse(t, &Rfc3339).map_err(|e| {
                    err(format!(
                        "issue.updated_at = {t:?} is not an RFC 3339 time ({e}); expected e.g. \"2023-07-13T09:37:01Z\""
                    ))
                })
            })
            .transpose()?;
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
            updated_at,
        };
        let sender = raw.sender.ok_or_else(|| err("no sender".into()))?;
        if let Some(action) = issue_action {
            return Ok(WebhookEvent::Issue {
                action,
                issue,
                sender: Login(sender.login),
                installation,
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
            sender_is_bot: sender.kind.as_deref() == Some("Bot"),
            sender: Login(sender.login),
            installation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> serde_json::Value {
        let path = format!(
            "{}/tests/fixtures/github-webhooks/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    /// A lone surrogate escape, which serde_json refuses, in a field the bot never reads (the
    /// repository's description) and in one it does (the comment): the delivery still parses,
    /// the comment's half character read as U+FFFD.
    #[test]
    fn a_lone_surrogate_escape_does_not_fail_the_delivery() {
        let mut p = fixture("issue_comment_created_webhook_event.json");
        p["repository"]["description"] = "MARKER_DESC".into();
        p["comment"]["body"] = "/approve MARKER_BODY".into();
        let text = serde_json::to_string(&p)
            .unwrap()
            .replace("MARKER_DESC", r"lone \ud800 half")
            .replace("MARKER_BODY", r"\udfff");
        assert!(
            serde_json::from_str::<Value>(&text).is_err(),
            "the body must hold a lone half"
        );
        let event = WebhookEvent::parse("issue_comment", text.as_bytes()).unwrap();
        let WebhookEvent::Comment { comment, .. } = event else {
            panic!("not a comment: {event:?}");
        };
        assert_eq!(comment.body, "/approve \u{fffd}");
    }

    #[test]
    fn ignored_actions_are_ignored_before_the_strict_parse() {
        // `issues.assigned` with an issue whose fields drifted (a string number, no user): an
        // action the bot does not handle must not fail on fields it never reads.
        let mut p = fixture("issues_opened_webhook_event.json");
        p["action"] = "assigned".into();
        p["issue"]["number"] = "seven".into();
        p["issue"].as_object_mut().unwrap().remove("user");
        let body = serde_json::to_vec(&p).unwrap();
        match WebhookEvent::parse("issues", &body).unwrap() {
            WebhookEvent::Ignored { reason, .. } => {
                assert_eq!(reason, "`issues.assigned` is not handled")
            }
            other => panic!("{other:?}"),
        }
        // The same drift in a handled action is an error naming what is wrong.
        p["action"] = "opened".into();
        let err = WebhookEvent::parse("issues", &serde_json::to_vec(&p).unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("malformed `issues` payload"),
            "{err}"
        );
        // A label event of another label is ignored the same way.
        let mut l = fixture("issues_labeled_webhook_event.json");
        l["issue"] = serde_json::Value::Null;
        match WebhookEvent::parse("issues", &serde_json::to_vec(&l).unwrap()).unwrap() {
            WebhookEvent::Ignored { reason, .. } => assert!(reason.contains("enhancement")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn comments_carry_the_sender_and_the_installation() {
        let mut p = fixture("issue_comment_edited_webhook_event.json");
        p["sender"]["login"] = "editor".into();
        p["sender"]["type"] = "User".into();
        match WebhookEvent::parse("issue_comment", &serde_json::to_vec(&p).unwrap()).unwrap() {
            WebhookEvent::Comment {
                sender,
                comment,
                installation,
                sender_is_bot,
                issue,
                ..
            } => {
                assert_eq!(sender, Login::new("editor"));
                assert_ne!(comment.author, sender);
                assert!(!sender_is_bot);
                assert_eq!(installation, Some(InstallationId(7777777)));
                assert_eq!(
                    issue.updated_at.map(|t| t.unix_timestamp()),
                    Some(1689688466)
                );
            }
            other => panic!("{other:?}"),
        }
        let mut bad = fixture("issues_opened_webhook_event.json");
        bad["issue"]["updated_at"] = "yesterday".into();
        let err = WebhookEvent::parse("issues", &serde_json::to_vec(&bad).unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("issue.updated_at = \"yesterday\""),
            "{err}"
        );
    }
}
