//! The test harness: a bot wired to the fake GitHub and an in-memory lab, webhooks signed and
//! sent through the axum router with `oneshot`, and payloads built from GitHub's recorded
//! deliveries in `github-bot/tests/fixtures/github-webhooks/` with our own issue and comment bodies.
//!
//! Processing is driven explicitly with [`Harness::drain`] (the worker's `process_pending`),
//! so tests need no sleeps: when it returns, every queued delivery has been handled.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use glassbox_github_bot::config::{BotConfig, GitHubAuth, RetryConfig};
use glassbox_github_bot::form::render_issue_form;
use glassbox_github_bot::signature::sign;
use glassbox_github_bot::{
    Bot, GitHub, InMemoryLab, Login, RepoName, Store, WebhookSettings, Worker, start_intake,
    webhook_router,
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tower::ServiceExt;

use crate::fake_github::FakeGitHub;

pub const SECRET: &str = "test webhook secret";
pub const REPO: &str = "glassbox-lab/glassbox";
pub const TINY_SPEC: &str = include_str!("../../../examples/tiny.toml");

pub fn fixture(name: &str) -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/github-webhooks/"
    );
    let text = std::fs::read_to_string(format!("{path}{name}"))
        .unwrap_or_else(|e| panic!("fixture {path}{name}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// A rendered issue form with the tiny spec, changed by `edit`.
pub fn form_body(edit: impl FnOnce(&str) -> String) -> String {
    render_issue_form(
        "A 2-layer, 4-expert MoE reaches within 10% of the Markov entropy floor.",
        Some("eval/markov/loss = 1.30 +- 0.05"),
        &edit(TINY_SPEC),
        true,
    )
}

pub fn default_config(api: &str) -> BotConfig {
    BotConfig {
        bot_login: Login::new("glassbox-bot"),
        repositories: vec![RepoName::parse(REPO).unwrap()],
        webhook_secrets: vec!["an old secret".into(), SECRET.into()],
        max_body_bytes: glassbox_github_bot::config::DEFAULT_MAX_BODY_BYTES,
        maintainers: vec![Login::new("alice"), Login::new("bob")],
        collaborators_are_maintainers: false,
        allow_self_approval: false,
        flops_per_second: 1.0e12,
        dashboard_url: "https://lab.example.org".into(),
        api_base_url: api.to_string(),
        auth: GitHubAuth::Token {
            token: "test-token".into(),
        },
        budget: Default::default(),
        retry: RetryConfig {
            max_attempts: 4,
            base_backoff_ms: 1,
            max_wait_seconds: 2,
        },
        ignored_retention_hours: glassbox_github_bot::config::DEFAULT_IGNORED_RETENTION_HOURS,
    }
}

pub struct Harness {
    pub gh: FakeGitHub,
    pub lab: InMemoryLab,
    pub bot: Bot<InMemoryLab>,
    pub router: Router,
    pub worker: Worker<InMemoryLab>,
    pub store: Store,
    pub db_url: String,
    pub _dir: tempfile::TempDir,
    next_delivery: u64,
}

impl Harness {
    pub async fn new() -> Self {
        Self::with_config(|_| {}).await
    }

    pub async fn with_config(tweak: impl FnOnce(&mut BotConfig)) -> Self {
        let gh = FakeGitHub::start().await;
        let mut config = default_config(&gh.uri());
        tweak(&mut config);
        config.validate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let db_url = format!("sqlite://{}", dir.path().join("bot.db").display());
        let store = Store::open(&db_url).await.unwrap();
        // An App config is tested for the bot's scope check only; the fake GitHub is reached
        // with a token either way (minting installation tokens needs a real key and GitHub).
        let mut client_config = config.clone();
        client_config.auth = GitHubAuth::Token {
            token: "test-token".into(),
        };
        let github = GitHub::from_config(&client_config).unwrap();
        let lab = InMemoryLab::new();
        let settings = WebhookSettings {
            secrets: config.webhook_secrets.clone(),
            max_body_bytes: config.max_body_bytes,
        };
        let bot = Bot::new(config, github, lab.clone(), store.clone());
        let wake = Arc::new(Notify::new());
        let (intake, _task) = start_intake(store.clone(), wake.clone());
        let router = webhook_router(settings, intake);
        let worker = Worker::new(bot.clone(), wake.clone());
        Self {
            gh,
            lab,
            bot,
            router,
            worker,
            store,
            db_url,
            _dir: dir,
            next_delivery: 0,
        }
    }

    /// Sends raw bytes with the given headers; returns status and body text.
    pub async fn post(&self, headers: &[(&str, String)], body: Vec<u8>) -> (StatusCode, String) {
        let mut req = Request::post(glassbox_github_bot::WEBHOOK_PATH);
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        let resp = self
            .router
            .clone()
            .oneshot(req.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Signs and sends `payload` as `event` with an explicit delivery id.
    pub async fn deliver_as(&self, event: &str, delivery: &str, payload: &Value) -> StatusCode {
        let body = serde_json::to_vec(payload).unwrap();
        let headers = [
            ("x-github-event", event.to_string()),
            ("x-github-delivery", delivery.to_string()),
            ("x-hub-signature-256", sign(SECRET.as_bytes(), &body)),
            ("content-type", "application/json".to_string()),
        ];
        self.post(&headers, body).await.0
    }

    /// Signs and sends with a fresh delivery id, then processes the queue; returns the id.
    pub async fn deliver(&mut self, event: &str, payload: &Value) -> String {
        self.next_delivery += 1;
        let id = format!("delivery-{}", self.next_delivery);
        let status = self.deliver_as(event, &id, payload).await;
        assert_eq!(status, StatusCode::ACCEPTED, "delivery {id} of {event}");
        self.drain().await;
        id
    }

    /// The stored record of a delivery.
    pub async fn delivery(&self, id: &str) -> glassbox_github_bot::store::DeliveryRecord {
        self.store
            .list_deliveries(None, 10_000)
            .await
            .unwrap()
            .into_iter()
            .find(|d| d.id.0 == id)
            .unwrap_or_else(|| panic!("no delivery {id}"))
    }

    /// Processes every pending delivery (the sync point: no sleeps).
    pub async fn drain(&self) -> usize {
        self.worker.process_pending().await.unwrap()
    }

    /// Bodies of the comments on an issue, in order.
    pub fn comment_bodies(&self, issue: u64) -> Vec<String> {
        self.gh
            .comments_on(issue)
            .into_iter()
            .map(|(_, c)| c.body)
            .collect()
    }
}

fn set_repo(p: &mut Value) {
    p["repository"]["full_name"] = json!(REPO);
    p["repository"]["name"] = json!("glassbox");
}

fn set_issue(p: &mut Value, number: u64, author: &str, body: &str) {
    let issue = &mut p["issue"];
    issue["number"] = json!(number);
    issue["title"] = json!("[experiment] tiny MoE");
    issue["body"] = json!(body);
    issue["user"]["login"] = json!(author);
    issue["labels"] = json!([{"name": "experiment", "color": "ededed"}]);
    issue["html_url"] = json!(format!("https://github.com/{REPO}/issues/{number}"));
    if let Some(o) = issue.as_object_mut() {
        o.remove("pull_request");
    }
}

/// `issues` `opened` (or another action) from the recorded payload.
pub fn issue_event(action: &str, number: u64, author: &str, body: &str) -> Value {
    let mut p = fixture("issues_opened_webhook_event.json");
    p["action"] = json!(action);
    set_repo(&mut p);
    set_issue(&mut p, number, author, body);
    p["sender"]["login"] = json!(author);
    p
}

/// `issue_comment` `created` from the recorded payload.
pub fn comment_created(
    number: u64,
    issue_author: &str,
    issue_body: &str,
    commenter: &str,
    text: &str,
    id: u64,
) -> Value {
    let mut p = fixture("issue_comment_created_webhook_event.json");
    set_repo(&mut p);
    set_issue(&mut p, number, issue_author, issue_body);
    p["comment"]["id"] = json!(id);
    p["comment"]["body"] = json!(text);
    p["comment"]["user"]["login"] = json!(commenter);
    p["comment"]["user"]["type"] = json!("User");
    p["sender"]["login"] = json!(commenter);
    p["sender"]["type"] = json!("User");
    p
}

/// Sets the issue's `updated_at` (GitHub's order of issue events), as Unix seconds.
pub fn at(mut p: Value, unix_seconds: i64) -> Value {
    let t = time::OffsetDateTime::from_unix_timestamp(unix_seconds)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    p["issue"]["updated_at"] = json!(t);
    p
}

/// `issue_comment` `edited` from the recorded payload, with the previous text in `changes`.
pub fn comment_edited(
    number: u64,
    issue_author: &str,
    issue_body: &str,
    commenter: &str,
    before: &str,
    after: &str,
    id: u64,
) -> Value {
    let mut p = fixture("issue_comment_edited_webhook_event.json");
    set_repo(&mut p);
    set_issue(&mut p, number, issue_author, issue_body);
    p["changes"] = json!({"body": {"from": before}});
    p["comment"]["id"] = json!(id);
    p["comment"]["body"] = json!(after);
    p["comment"]["user"]["login"] = json!(commenter);
    p["comment"]["user"]["type"] = json!("User");
    p["sender"]["login"] = json!(commenter);
    p["sender"]["type"] = json!("User");
    p
}
