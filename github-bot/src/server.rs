//! Webhook intake: the axum [`Router`] for `POST /github/webhook`, and the group-commit writer
//! that makes each accepted delivery durable before it is acknowledged.
//!
//! Per request, in order: a content type other than `application/json` is refused (415,
//! unread); the body is capped (`max_body_bytes`, else 413: unread when its length is declared)
//! and read within the listener's body deadline (else 408); the
//! `X-Hub-Signature-256` HMAC is verified against every configured secret (else 401, nothing
//! stored); `ping` is answered 200 at once; any other event is written to the `deliveries`
//! table keyed by `X-GitHub-Delivery`, then answered 202. A repeat id is answered 200
//! `duplicate` and not queued again, unless that delivery had `failed`: GitHub's "Redeliver"
//! keeps the id, so it is queued again (202). Processing happens later, in [`crate::worker`],
//! which is woken through a [`Notify`]; events the bot does not handle are stored without
//! payload, as `ignored` with the reason, and acknowledged.
//!
//! A batch the database refuses (locked, I/O) is retried within [`STORE_BUDGET`] before the
//! requests waiting on it are answered 503, since GitHub does not redeliver by itself.
//!
//! The writer task batches concurrent deliveries into one SQLite transaction (one fsync), so
//! durability costs one disk flush per batch rather than per request, and checkpoints the WAL
//! in the background so no acknowledgement waits for one. This module does not
//! parse payloads beyond the event name and does not call GitHub.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::event::HANDLED_EVENTS;
use crate::ids::DeliveryId;
use crate::secret::Secret;
use crate::signature::{self, SIGNATURE_HEADER};
use crate::store::{Intaken, NewDelivery, Store};

/// The path the router serves.
pub const WEBHOOK_PATH: &str = "/github/webhook";

/// Most deliveries committed in one transaction.
const MAX_BATCH: usize = 512;

/// Deliveries committed between two background WAL checkpoints.
const CHECKPOINT_EVERY: usize = 256;

type WriteRequest = (NewDelivery, oneshot::Sender<Result<Intaken, String>>);

/// A handle to the writer task; cheap to clone.
#[derive(Debug, Clone)]
pub struct Intake {
    tx: mpsc::Sender<WriteRequest>,
}

/// Starts the writer task on the current tokio runtime. `wake` is notified after every
/// committed batch that added a delivery to process.
pub fn start_intake(store: Store, wake: Arc<Notify>) -> (Intake, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<WriteRequest>(4096);
    let task = tokio::spawn(async move {
        let mut batch: Vec<WriteRequest> = Vec::with_capacity(MAX_BATCH);
        let mut since_checkpoint = 0usize;
        let checkpointing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        while let Some(first) = rx.recv().await {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            let deliveries: Vec<NewDelivery> = batch.iter().map(|(d, _)| d.clone()).collect();
            match insert_within_budget(&store, &deliveries).await {
                Ok(fresh) => {
                    let wake_worker =
                        fresh
                            .iter()
                            .zip(&deliveries)
                            .any(|(intaken, d)| match intaken {
                                Intaken::New => d.payload.is_some(),
                                Intaken::Requeued => true,
                                Intaken::Duplicate => false,
                            });
                    for ((_, reply), new) in batch.drain(..).zip(fresh) {
                        let _ = reply.send(Ok(new));
                    }
                    if wake_worker {
                        wake.notify_one();
                    }
                    // Checkpoint on another connection while the next batch commits, so no
                    // acknowledgement waits for the WAL to be copied back.
                    since_checkpoint += deliveries.len();
                    if since_checkpoint >= CHECKPOINT_EVERY
                        && !checkpointing.swap(true, std::sync::atomic::Ordering::AcqRel)
                    {
                        since_checkpoint = 0;
                        let (store, flag) = (store.clone(), checkpointing.clone());
                        tokio::spawn(async move {
                            if let Err(e) = store.checkpoint().await {
                                tracing::warn!(error = %e, "WAL checkpoint failed");
                            }
                            flag.store(false, std::sync::atomic::Ordering::Release);
                        });
                    }
                }
                Err(e) => {
                    tracing::error!(
                        error = %e,
                        deliveries = deliveries.len(),
                        "could not store webhook deliveries within the budget; answered 503 (GitHub does not redeliver by itself)"
                    );
                    for (_, reply) in batch.drain(..) {
                        let _ = reply.send(Err(e.to_string()));
                    }
                }
            }
        }
    });
    (Intake { tx }, task)
}

/// How long the writer keeps retrying a batch it could not store before the requests waiting
/// on it are answered 503. GitHub gives a delivery 10 s and does not redeliver by itself, so a
/// delivery refused is a delivery lost until someone presses "Redeliver": every moment of the
/// budget is spent trying, with a margin for the answer to travel.
const STORE_BUDGET: std::time::Duration = std::time::Duration::from_secs(8);

/// Stores a batch, retrying within [`STORE_BUDGET`]: a locked database, a checkpoint that
/// holds the file, a disk that fills and is freed, all pass. A failed attempt's transaction
/// rolled back whole, and storing is idempotent by delivery id, so a retry can never store a
/// delivery twice.
async fn insert_within_budget(
    store: &Store,
    deliveries: &[NewDelivery],
) -> Result<Vec<Intaken>, crate::store::StoreError> {
    let started = tokio::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(20);
    let mut attempts = 1u32;
    loop {
        match store.insert_deliveries(deliveries).await {
            Ok(done) => {
                if attempts > 1 {
                    tracing::info!(attempts, "stored webhook deliveries after retrying");
                }
                return Ok(done);
            }
            Err(e) if started.elapsed() + pause < STORE_BUDGET => {
                tracing::warn!(error = %e, attempts, "could not store webhook deliveries; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(500));
                attempts += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// What the webhook route needs.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Secrets; any one verifies.
    pub secrets: Vec<Secret>,
    /// Body cap in bytes.
    pub max_body_bytes: usize,
}

#[derive(Debug)]
struct RouteState {
    settings: WebhookSettings,
    intake: Intake,
}

/// The router serving [`WEBHOOK_PATH`]; the web server merges it into its own.
pub fn webhook_router(settings: WebhookSettings, intake: Intake) -> Router {
    let limit = settings.max_body_bytes;
    Router::new()
        .route(WEBHOOK_PATH, post(receive))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(Arc::new(RouteState { settings, intake }))
}

fn reply(status: StatusCode, text: &'static str) -> Response {
    (status, text).into_response()
}

/// Whether the request says its body is JSON (`application/json`, parameters allowed).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

fn too_large(cap: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is over {cap} bytes, the most a delivery may be\n"),
    )
        .into_response()
}

/// The answer to a body that could not be read: 413 over the cap, 408 when the server's body
/// deadline passed (the listener fails the body with `io::ErrorKind::TimedOut`), else 400.
fn body_error(e: &axum::Error, cap: usize) -> Response {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return too_large(cap);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return (StatusCode::REQUEST_TIMEOUT, format!("{io}\n")).into_response();
        }
        cur = err.source();
    }
    (
        StatusCode::BAD_REQUEST,
        format!("cannot read the body: {e}\n"),
    )
        .into_response()
}

async fn receive(State(state): State<Arc<RouteState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    // GitHub sends JSON when the webhook's content type is `application/json`; a form-encoded
    // delivery (the other setting) or anything else is refused before a byte of it is read.
    if !is_json(&headers) {
        return reply(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected Content-Type: application/json (set the webhook's content type to application/json)\n",
        );
    }
    let cap = state.settings.max_body_bytes;
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap as u64) {
        return too_large(cap);
    }
    let body = match axum::body::to_bytes(body, cap).await {
        Ok(b) => b,
        Err(e) => return body_error(&e, state.settings.max_body_bytes),
    };
    let sig = headers.get(SIGNATURE_HEADER).map(|v| v.as_bytes());
    if let Err(e) = signature::verify(&state.settings.secrets, sig, &body) {
        tracing::warn!(error = %e, "webhook refused");
        return reply(StatusCode::UNAUTHORIZED, "signature verification failed\n");
    }
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .filter(|s| !s.is_empty() && s.len() <= 200)
            .map(str::to_string)
    };
    let Some(event) = text("x-github-event") else {
        return reply(StatusCode::BAD_REQUEST, "missing X-GitHub-Event header\n");
    };
    if event == "ping" {
        return reply(StatusCode::OK, "pong\n");
    }
    let Some(delivery) = text("x-github-delivery") else {
        return reply(
            StatusCode::BAD_REQUEST,
            "missing X-GitHub-Delivery header\n",
        );
    };
    let handled = HANDLED_EVENTS.contains(&event.as_str());
    let new = NewDelivery {
        id: DeliveryId(delivery),
        event,
        payload: handled.then(|| body.to_vec()),
    };
    let (tx, rx) = oneshot::channel();
    if state.intake.tx.send((new, tx)).await.is_err() {
        return reply(StatusCode::SERVICE_UNAVAILABLE, "intake is shutting down\n");
    }
    match rx.await {
        Ok(Ok(Intaken::New)) if handled => reply(StatusCode::ACCEPTED, "queued\n"),
        Ok(Ok(Intaken::New)) => reply(StatusCode::ACCEPTED, "ignored: event not handled\n"),
        Ok(Ok(Intaken::Requeued)) => reply(
            StatusCode::ACCEPTED,
            "redelivery of a failed delivery; queued again\n",
        ),
        Ok(Ok(Intaken::Duplicate)) => {
            reply(StatusCode::OK, "duplicate delivery; already accepted\n")
        }
        Ok(Err(_)) | Err(_) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "could not store the delivery; redeliver later\n",
        ),
    }
}
