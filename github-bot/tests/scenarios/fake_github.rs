//! A fake GitHub REST API on loopback (wiremock) holding an in-memory model of comments and
//! labels, for the real octocrab client to talk to.
//!
//! One catch-all responder routes by method and path, so the model, not a list of canned
//! answers, decides each response. Failure injection: the next N requests of a route answer
//! 500 (or another status), and the permission lookup can be made to fail. It is not a full
//! GitHub: only the routes the bot calls exist; anything else answers 404 and is logged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate, matchers::any};

/// A comment as the fake holds it.
#[derive(Debug, Clone)]
pub struct FakeComment {
    pub issue: u64,
    pub body: String,
    pub edits: u32,
    /// Who wrote it: the bot for everything posted through the API.
    pub author: String,
}

/// The login the fake gives comments posted through its API (the harness's `bot_login`).
pub const FAKE_BOT_LOGIN: &str = "glassbox-bot";

/// One injected failure: the next request of `method` under `prefix` answers `status`.
#[derive(Debug, Clone)]
pub struct InjectedFailure {
    pub method: String,
    pub prefix: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Default)]
pub struct Model {
    pub comments: BTreeMap<u64, FakeComment>,
    next_comment_id: u64,
    pub labels: BTreeMap<u64, BTreeSet<String>>,
    /// login -> (permission, role_name)
    pub permissions: HashMap<String, (String, String)>,
    /// (method, path prefix) -> statuses to answer before serving normally.
    pub failures: Vec<InjectedFailure>,
    /// Every request, as `METHOD path`.
    pub requests: Vec<String>,
}

#[derive(Clone)]
struct Responder(Arc<Mutex<Model>>);

fn segments(path: &str) -> Vec<String> {
    path.trim_matches('/')
        .split('/')
        .map(|s| s.replace("%20", " "))
        .collect()
}

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut m = self.0.lock().unwrap();
        let method = req.method.to_string();
        let path = req.url.path().to_string();
        m.requests.push(format!("{method} {path}"));
        if let Some(i) = m
            .failures
            .iter()
            .position(|f| f.method == method && path.starts_with(f.prefix.as_str()))
        {
            let InjectedFailure {
                status, headers, ..
            } = m.failures.remove(i);
            let mut t =
                ResponseTemplate::new(status).set_body_json(json!({"message": "injected failure"}));
            for (k, v) in headers {
                t = t.insert_header(k.as_str(), v.as_str());
            }
            return t;
        }
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let seg = segments(&path);
        let seg: Vec<&str> = seg.iter().map(String::as_str).collect();
        match (method.as_str(), seg.as_slice()) {
            ("POST", ["repos", _, _, "issues", n, "comments"]) => {
                let issue: u64 = n.parse().unwrap();
                m.next_comment_id += 1;
                let id = 9000 + m.next_comment_id;
                let text = body["body"].as_str().unwrap_or_default().to_string();
                m.comments.insert(
                    id,
                    FakeComment {
                        issue,
                        body: text.clone(),
                        edits: 0,
                        author: FAKE_BOT_LOGIN.into(),
                    },
                );
                ResponseTemplate::new(201).set_body_json(json!({"id": id, "body": text}))
            }
            ("GET", ["repos", _, _, "issues", n, "comments"]) => {
                let issue: u64 = n.parse().unwrap();
                let query = |k: &str| {
                    req.url
                        .query_pairs()
                        .find(|(q, _)| q == k)
                        .and_then(|(_, v)| v.parse::<usize>().ok())
                };
                let (per_page, page) =
                    (query("per_page").unwrap_or(30), query("page").unwrap_or(1));
                let all: Vec<Value> = m
                    .comments
                    .iter()
                    .filter(|(_, c)| c.issue == issue)
                    .skip(per_page * (page.max(1) - 1))
                    .take(per_page)
                    .map(|(id, c)| {
                        json!({"id": id, "body": c.body, "user": {"login": c.author, "type": "User"}})
                    })
                    .collect();
                ResponseTemplate::new(200).set_body_json(all)
            }
            ("PATCH", ["repos", _, _, "issues", "comments", id]) => {
                let id: u64 = id.parse().unwrap();
                match m.comments.get_mut(&id) {
                    Some(c) => {
                        c.body = body["body"].as_str().unwrap_or_default().to_string();
                        c.edits += 1;
                        ResponseTemplate::new(200).set_body_json(json!({"id": id}))
                    }
                    None => {
                        ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found"}))
                    }
                }
            }
            ("POST", ["repos", _, _, "issues", n, "labels"]) => {
                let issue: u64 = n.parse().unwrap();
                let set = m.labels.entry(issue).or_default();
                for l in body["labels"].as_array().into_iter().flatten() {
                    set.insert(l.as_str().unwrap_or_default().to_string());
                }
                let all: Vec<Value> = set.iter().map(|l| json!({"name": l})).collect();
                ResponseTemplate::new(200).set_body_json(all)
            }
            ("DELETE", ["repos", _, _, "issues", n, "labels", name]) => {
                let issue: u64 = n.parse().unwrap();
                let removed = m.labels.entry(issue).or_default().remove(*name);
                if removed {
                    ResponseTemplate::new(200).set_body_json(json!([]))
                } else {
                    ResponseTemplate::new(404)
                        .set_body_json(json!({"message": "Label does not exist"}))
                }
            }
            ("GET", ["repos", _, _, "collaborators", user, "permission"]) => {
                let (p, r) = m
                    .permissions
                    .get(&user.to_ascii_lowercase())
                    .cloned()
                    .unwrap_or(("read".into(), "read".into()));
                ResponseTemplate::new(200).set_body_json(json!({"permission": p, "role_name": r}))
            }
            _ => ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found (fake)"})),
        }
    }
}

/// The running fake.
pub struct FakeGitHub {
    pub server: MockServer,
    model: Arc<Mutex<Model>>,
}

impl FakeGitHub {
    pub async fn start() -> Self {
        let server = MockServer::start().await;
        let model = Arc::new(Mutex::new(Model::default()));
        Mock::given(any())
            .respond_with(Responder(model.clone()))
            .mount(&server)
            .await;
        Self { server, model }
    }

    pub fn uri(&self) -> String {
        self.server.uri()
    }

    pub fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap()
    }

    /// Comments on an issue, in creation order.
    pub fn comments_on(&self, issue: u64) -> Vec<(u64, FakeComment)> {
        self.model()
            .comments
            .iter()
            .filter(|(_, c)| c.issue == issue)
            .map(|(id, c)| (*id, c.clone()))
            .collect()
    }

    pub fn labels_on(&self, issue: u64) -> BTreeSet<String> {
        self.model().labels.get(&issue).cloned().unwrap_or_default()
    }

    /// The next `n` requests of `method` under `prefix` answer `status` (with `headers`).
    pub fn fail_next(
        &self,
        method: &str,
        prefix: &str,
        status: u16,
        n: usize,
        headers: &[(&str, &str)],
    ) {
        let mut m = self.model();
        for _ in 0..n {
            m.failures.push(InjectedFailure {
                method: method.into(),
                prefix: prefix.into(),
                status,
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            });
        }
    }

    /// A comment written on GitHub by `author` (not through the bot); returns its id.
    pub fn add_comment(&self, issue: u64, author: &str, body: &str) -> u64 {
        let mut m = self.model();
        m.next_comment_id += 1;
        let id = 9000 + m.next_comment_id;
        m.comments.insert(
            id,
            FakeComment {
                issue,
                body: body.into(),
                edits: 0,
                author: author.into(),
            },
        );
        id
    }

    pub fn set_permission(&self, login: &str, permission: &str, role: &str) {
        self.model()
            .permissions
            .insert(login.to_ascii_lowercase(), (permission.into(), role.into()));
    }

    pub fn count_requests(&self, prefix: &str) -> usize {
        self.model()
            .requests
            .iter()
            .filter(|r| r.starts_with(prefix))
            .count()
    }
}
