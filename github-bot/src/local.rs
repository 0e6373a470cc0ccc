//! A local stand-in for GitHub, for `glassbox quickstart` and demos without a network: the few
//! REST routes the bot calls (create and edit an issue comment, add and remove labels, a
//! collaborator's permission) as an axum [`Router`], recording what the bot said so the
//! dashboard can show it, clearly labelled as local. The bot reaches it through its real
//! octocrab client (`api_base_url` pointed here), so the quickstart exercises the same code as a
//! real deployment.
//!
//! Also here: [`LocalIssues`], which builds the signed webhook deliveries a real GitHub would
//! send for an issue opened from the experiment form and for a comment on it. Their links
//! (`html_url`) point at the stand-in's own page of the issue (`<prefix>/<owner>/<repo>/issues/<n>`:
//! the issue as opened, the bot's comments and the labels), never at github.com, where no such
//! issue exists.
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

/// An issue as it was opened, for the stand-in's page of it.
#[derive(Debug, Clone, PartialEq)]
struct LocalIssue {
    author: String,
    title: String,
    body: String,
}

#[derive(Debug, Default)]
struct Model {
    next_id: u64,
    issues: BTreeMap<(String, u64), LocalIssue>,
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

    /// Remembers an issue as opened, so the stand-in's page of it can show it.
    pub fn note_issue(&self, repo: &str, number: u64, author: &str, title: &str, body: &str) {
        self.lock().issues.insert(
            (repo.to_string(), number),
            LocalIssue {
                author: author.to_string(),
                title: title.to_string(),
                body: body.to_string(),
            },
        );
    }

    /// The REST routes and the issue pages, to be nested under [`LOCAL_GITHUB_PREFIX`].
    pub fn router(&self) -> Router {
        Router::new()
            .route("/{owner}/{repo}/issues/{number}", get(issue_page))
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

/// The page an issue's `html_url` points at: the issue as opened, then the bot's comments
/// (Markdown shown as written) and the labels, under a banner saying this is a local stand-in.
async fn issue_page(
    State(gh): State<LocalGitHub>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
) -> Response {
    use maud::{DOCTYPE, html};
    let repo = format!("{owner}/{repo}");
    let m = gh.lock();
    let issue = m.issues.get(&(repo.clone(), number)).cloned();
    let comments: Vec<LocalComment> = m
        .comments
        .values()
        .filter(|c| c.repo == repo && c.issue == number)
        .cloned()
        .collect();
    let labels: Vec<String> = m
        .labels
        .get(&(repo.clone(), number))
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default();
    drop(m);
    if issue.is_none() && comments.is_empty() {
        return (
            StatusCode::NOT_FOUND,
            format!("no issue #{number} in {repo} on this local stand-in for GitHub"),
        )
            .into_response();
    }
    let title = issue
        .as_ref()
        .map_or_else(|| format!("#{number}"), |i| i.title.clone());
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · " (repo) "#" (number) " (local stand-in)" }
                link rel="stylesheet" href="/assets/style.css";
            }
            body {
                main {
                    p.banner {
                        "A local stand-in for GitHub: this issue exists only on this machine, "
                        "for the quickstart. Nothing here is on github.com."
                    }
                    h1 { (title) " " span.muted { (repo) "#" (number) } }
                    @if !labels.is_empty() {
                        p { "Labels: " @for l in &labels { span.badge { (l) } " " } }
                    }
                    @if let Some(i) = &issue {
                        section {
                            h2 { (i.author) " opened it" }
                            pre.comment { (i.body) }
                        }
                    }
                    @for c in &comments {
                        section {
                            h2 {
                                (LOCAL_BOT_LOGIN) " commented"
                                @if c.edits > 0 { " (edited " (c.edits) "×)" }
                            }
                            pre.comment { (c.body) }
                        }
                    }
                }
            }
        }
    };
    (
        [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page.into_string(),
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
    /// Where the stand-in is served, e.g. `http://127.0.0.1:8080/local-github`: the issue
    /// links point under it.
    pub html_base: String,
}

impl LocalIssues {
    /// The deliveries of `repo`'s issues, linking to the stand-in served at `html_base`.
    pub fn new(repo: &str, html_base: &str) -> Self {
        Self {
            repo: repo.to_string(),
            html_base: html_base.trim_end_matches('/').to_string(),
        }
    }

    fn repository(&self) -> Value {
        let (owner, name) = self.repo.split_once('/').unwrap_or(("local", "lab"));
        json!({
            "id": 1,
            "name": name,
            "full_name": self.repo,
            "private": false,
            "owner": {"login": owner, "type": "Organization"},
            "html_url": format!("{}/{}", self.html_base, self.repo),
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
            "html_url": format!("{}/{}/issues/{number}", self.html_base, self.repo),
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

    #[tokio::test]
    async fn an_issue_link_opens_the_stand_ins_page_of_it_escaped() {
        use tower::ServiceExt;
        let gh = LocalGitHub::new(&[]);
        gh.note_issue(
            "o/r",
            1,
            "ada",
            "[experiment] <b>tiny</b>",
            "hello <script>",
        );
        let get = |path: &str| {
            gh.router().oneshot(
                axum::http::Request::get(path)
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
        };
        let resp = get("/o/r/issues/1").await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let bytes = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        let page = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(page.contains("local stand-in"), "{page}");
        assert!(page.contains("hello &lt;script&gt;"), "{page}");
        assert!(!page.contains("<script>"), "{page}");
        let missing = get("/o/r/issues/2").await.unwrap();
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn built_deliveries_parse_as_the_bot_expects() {
        let issues = LocalIssues::new("local/lab", "http://127.0.0.1:9/local-github/");
        let opened = issues.opened(1, "ada", "[experiment] tiny", "body");
        assert_eq!(
            opened["issue"]["html_url"],
            "http://127.0.0.1:9/local-github/local/lab/issues/1"
        );
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
