//! A local stand-in for GitHub, for `glassbox quickstart` and demos without a network: the few
//! REST routes the bot calls (create and edit an issue comment, add and remove labels, a
//! collaborator's permission) as an axum [`Router`], recording what the bot said so the
//! dashboard can show it, clearly labelled as local. The bot reaches it through its real
//! octocrab client (`api_base_url` pointed here), so the quickstart exercises the same code as a
//! real deployment.
//!
//! Also here: [`LocalIssues`], which builds the signed webhook deliveries a real GitHub would
//! send for an issue opened from the experiment form and for a comment on it.
//!
//! Every comment it holds was posted through it, so it lists them as written by
//! [`LOCAL_BOT_LOGIN`] (the bot finds its own comments by marker among them).
//!
//! Not a GitHub emulator: no auth, one in-memory model, nothing persisted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{Value, json};

/// Where the stand-in is mounted on the lab's server.
pub const LOCAL_GITHUB_PREFIX: &str = "/local-github";

/// The author the stand-in gives every comment: the bot, which is the only one posting here.
/// Configure the bot's `bot_login` to this.
pub const LOCAL_BOT_LOGIN: &str = "glassbox-bot";

/// One comment the bot wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalComment {
    /// Its id.
    pub id: u64,
    /// `owner/repo`.
    pub repo: String,
    /// The issue.
    pub issue: u64,
    /// Current text.
    pub body: String,
    /// How many times it was edited.
    pub edits: u32,
}

#[derive(Debug, Default)]
struct Model {
    next_id: u64,
    comments: BTreeMap<u64, LocalComment>,
    labels: BTreeMap<(String, u64), BTreeSet<String>>,
    /// Logins with write access.
    maintainers: BTreeSet<String>,
}

/// The stand-in's state; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct LocalGitHub {
    model: Arc<Mutex<Model>>,
}

impl LocalGitHub {
    /// A stand-in where `maintainers` have write access to every repository.
    pub fn new(maintainers: &[&str]) -> Self {
        let s = Self::default();
        s.lock().maintainers = maintainers.iter().map(|m| m.to_ascii_lowercase()).collect();
        s
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every comment, oldest first.
    pub fn comments(&self) -> Vec<LocalComment> {
        self.lock().comments.values().cloned().collect()
    }

    /// The labels on an issue.
    pub fn labels(&self, repo: &str, issue: u64) -> Vec<String> {
        self.lock()
            .labels
            .get(&(repo.to_string(), issue))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The REST routes, to be nested under [`LOCAL_GITHUB_PREFIX`].
    pub fn router(&self) -> Router {
        Router::new()
            .route(
                "/repos/{owner}/{repo}/issues/{number}/comments",
                post(create_comment).get(list_comments),
            )
            .route(
                "/repos/{owner}/{repo}/issues/comments/{id}",
                patch(update_comment),
            )
            .route(
                "/repos/{owner}/{repo}/issues/{number}/labels",
                post(add_labels),
            )
            .route(
                "/repos/{owner}/{repo}/issues/{number}/labels/{name}",
                delete(remove_label),
            )
            .route(
                "/repos/{owner}/{repo}/collaborators/{user}/permission",
                get(permission),
            )
            .with_state(self.clone())
    }
}

fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"message": format!("Not Found ({what}, local stand-in)")})),
    )
        .into_response()
}

async fn create_comment(
    State(gh): State<LocalGitHub>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    Json(body): Json<Value>,
) -> Response {
    let text = body["body"].as_str().unwrap_or_default().to_string();
    let mut m = gh.lock();
    m.next_id += 1;
    let id = m.next_id;
    m.comments.insert(
        id,
        LocalComment {
            id,
            repo: format!("{owner}/{repo}"),
            issue: number,
            body: text.clone(),
            edits: 0,
        },
    );
    (StatusCode::CREATED, Json(json!({"id": id, "body": text}))).into_response()
}

async fn list_comments(
    State(gh): State<LocalGitHub>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    RawQuery(query): RawQuery,
) -> Response {
    // `per_page` (default 30) and `page` (from 1), as GitHub pages a list.
    let param = |name: &str| {
        query
            .as_deref()
            .unwrap_or_default()
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse::<usize>().ok())
    };
    let per_page = param("per_page").unwrap_or(30).clamp(1, 100);
    let page = param("page").unwrap_or(1).max(1);
    let repo = format!("{owner}/{repo}");
    let m = gh.lock();
    let all: Vec<Value> = m
        .comments
        .values()
        .filter(|c| c.repo == repo && c.issue == number)
        .skip(per_page.saturating_mul(page - 1))
        .take(per_page)
        .map(|c| json!({"id": c.id, "body": c.body, "user": {"login": LOCAL_BOT_LOGIN, "type": "Bot"}}))
        .collect();
    Json(all).into_response()
}

async fn update_comment(
    State(gh): State<LocalGitHub>,
    Path((_owner, _repo, id)): Path<(String, String, u64)>,
    Json(body): Json<Value>,
) -> Response {
    let mut m = gh.lock();
    match m.comments.get_mut(&id) {
        Some(c) => {
            c.body = body["body"].as_str().unwrap_or_default().to_string();
            c.edits += 1;
            Json(json!({"id": id, "body": c.body})).into_response()
        }
        None => not_found("comment"),
    }
}

async fn add_labels(
    State(gh): State<LocalGitHub>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    Json(body): Json<Value>,
) -> Response {
    let mut m = gh.lock();
    let set = m
        .labels
        .entry((format!("{owner}/{repo}"), number))
        .or_default();
    for l in body["labels"].as_array().into_iter().flatten() {
        if let Some(l) = l.as_str() {
            set.insert(l.to_string());
        }
    }
    let all: Vec<Value> = set.iter().map(|l| json!({"name": l})).collect();
    Json(all).into_response()
}

async fn remove_label(
    State(gh): State<LocalGitHub>,
    Path((owner, repo, number, name)): Path<(String, String, u64, String)>,
) -> Response {
    let mut m = gh.lock();
    let removed = m
        .labels
        .entry((format!("{owner}/{repo}"), number))
        .or_default()
        .remove(&name);
    if removed {
        Json(json!([])).into_response()
    } else {
        not_found("label")
    }
}

async fn permission(
    State(gh): State<LocalGitHub>,
    Path((_owner, _repo, user)): Path<(String, String, String)>,
) -> Response {
    let write = gh.lock().maintainers.contains(&user.to_ascii_lowercase());
    let p = if write { "write" } else { "read" };
    Json(json!({"permission": p, "role_name": p})).into_response()
}

/// Builds the webhook deliveries GitHub sends for one repository's experiment issues, in the
/// shape of GitHub's recorded payloads (only the fields the bot reads, plus their neighbours).
#[derive(Debug, Clone)]
pub struct LocalIssues {
    /// `owner/repo`.
    pub repo: String,
}

impl LocalIssues {
    fn repository(&self) -> Value {
        let (owner, name) = self.repo.split_once('/').unwrap_or(("local", "lab"));
        json!({
            "id": 1,
            "name": name,
            "full_name": self.repo,
            "private": false,
            "owner": {"login": owner, "type": "Organization"},
            "html_url": format!("https://github.com/{}", self.repo),
        })
    }

    fn issue(&self, number: u64, author: &str, title: &str, body: &str) -> Value {
        let now = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into());
        json!({
            "number": number,
            "title": title,
            "body": body,
            "state": "open",
            "user": {"login": author, "type": "User"},
            "labels": [{"name": "experiment", "color": "ededed"}],
            "html_url": format!("https://github.com/{}/issues/{number}", self.repo),
            "updated_at": now,
        })
    }

    /// `issues` / `opened`.
    pub fn opened(&self, number: u64, author: &str, title: &str, body: &str) -> Value {
        json!({
            "action": "opened",
            "issue": self.issue(number, author, title, body),
            "repository": self.repository(),
            "sender": {"login": author, "type": "User"},
        })
    }

    /// `issue_comment` / `created`.
    #[allow(clippy::too_many_arguments)]
    pub fn comment(
        &self,
        number: u64,
        issue_author: &str,
        title: &str,
        issue_body: &str,
        commenter: &str,
        text: &str,
        comment_id: u64,
    ) -> Value {
        json!({
            "action": "created",
            "issue": self.issue(number, issue_author, title, issue_body),
            "comment": {
                "id": comment_id,
                "body": text,
                "user": {"login": commenter, "type": "User"},
            },
            "repository": self.repository(),
            "sender": {"login": commenter, "type": "User"},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::WebhookEvent;

    #[tokio::test]
    async fn comments_are_listed_page_by_page_as_the_bots() {
        use tower::ServiceExt;
        let gh = LocalGitHub::new(&[]);
        let send = |req: axum::http::Request<axum::body::Body>| async {
            let resp = gh.router().oneshot(req).await.unwrap();
            let bytes = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap()
                .to_bytes();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        };
        for i in 0..3 {
            send(
                axum::http::Request::post("/repos/o/r/issues/1/comments")
                    .header("content-type", "application/json")
                    .body(json!({"body": format!("c{i}")}).to_string().into())
                    .unwrap(),
            )
            .await;
        }
        let page = |q: &str| {
            axum::http::Request::get(format!("/repos/o/r/issues/1/comments?{q}"))
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let second = send(page("per_page=2&page=2")).await;
        assert_eq!(second.as_array().unwrap().len(), 1, "{second}");
        assert_eq!(second[0]["body"], "c2");
        assert_eq!(second[0]["user"]["login"], LOCAL_BOT_LOGIN);
        assert_eq!(send(page("")).await.as_array().unwrap().len(), 3);
    }

    #[test]
    fn built_deliveries_parse_as_the_bot_expects() {
        let issues = LocalIssues {
            repo: "local/lab".into(),
        };
        let opened = issues.opened(1, "ada", "[experiment] tiny", "body");
        let e = WebhookEvent::parse("issues", &serde_json::to_vec(&opened).unwrap()).unwrap();
        assert!(matches!(e, WebhookEvent::Issue { .. }), "{e:?}");
        let c = issues.comment(
            1,
            "ada",
            "[experiment] tiny",
            "body",
            "grace",
            "/approve",
            7,
        );
        let e = WebhookEvent::parse("issue_comment", &serde_json::to_vec(&c).unwrap()).unwrap();
        assert!(matches!(e, WebhookEvent::Comment { .. }), "{e:?}");
    }

    #[test]
    fn signatures_verify_with_the_bot_verifier() {
        let body = br#"{"zen":"Keep it logically awesome."}"#;
        let header = crate::signature::sign(b"s3cret", body);
        assert!(crate::signature::verify(&["s3cret"], Some(header.as_bytes()), body).is_ok());
    }
}
