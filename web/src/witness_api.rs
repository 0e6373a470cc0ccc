//! The HTTP face of a C2SP tlog-witness (`glassbox witness serve`): `POST /add-checkpoint`
//! and the monitoring API's `GET /<origin hash>/checkpoint`, in front of
//! [`glassbox_ledger::witness::Witness`].
//!
//! Every request is bounded: the listener ([`crate::listener::serve_router`]) bounds headers,
//! body time and connections; this router refuses a body over
//! [`glassbox_ledger::witness::MAX_REQUEST_BYTES`] (413, unread when its length is declared)
//! and one whose body missed the listener's deadline (408). The witness's refusals keep the
//! status the spec gives them (a 409 answers the witness's size as `text/x.tlog.size`). Not
//! here: the checks themselves (the ledger's `witness` module) and the dashboard, which is a
//! separate, read-only server.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use glassbox_ledger::witness::{MAX_REQUEST_BYTES, Refusal, Witness, WitnessError};

/// The witness's routes.
pub fn witness_router(witness: Arc<Witness>) -> Router {
    Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .route("/{origin_hash}/checkpoint", get(latest))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(witness)
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

fn too_large() -> Response {
    text(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the body is over {MAX_REQUEST_BYTES} bytes, the most an add-checkpoint request may be\n"
        ),
    )
}

/// 413 over the cap, 408 past the listener's body deadline, else 400.
fn body_error(e: &axum::Error) -> Response {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return too_large();
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return text(StatusCode::REQUEST_TIMEOUT, format!("{io}\n"));
        }
        cur = err.source();
    }
    text(
        StatusCode::BAD_REQUEST,
        format!("cannot read the body: {e}\n"),
    )
}

async fn add_checkpoint(State(witness): State<Arc<Witness>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if declared_length(&parts.headers).is_some_and(|n| n > MAX_REQUEST_BYTES as u64) {
        return too_large();
    }
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(e) => return body_error(&e),
    };
    match witness.add_checkpoint(&body).await {
        Ok(lines) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            lines,
        )
            .into_response(),
        Err(WitnessError::Refused(r)) => refusal(&r),
        Err(e) => {
            tracing::error!(error = %e, "witness state");
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the witness cannot reach its state; try again later\n".into(),
            )
        }
    }
}

fn refusal(r: &Refusal) -> Response {
    let status = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let content_type = match r {
        Refusal::Conflict { .. } => "text/x.tlog.size",
        _ => "text/plain; charset=utf-8",
    };
    if status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::CONFLICT {
        tracing::warn!(status = status.as_u16(), reason = %r, "add-checkpoint refused");
    }
    (status, [(header::CONTENT_TYPE, content_type)], r.body()).into_response()
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

async fn latest(State(witness): State<Arc<Witness>>, Path(origin_hash): Path<String>) -> Response {
    if origin_hash.len() != 64
        || !origin_hash
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return text(
            StatusCode::NOT_FOUND,
            "expected /<lowercase hex SHA-256 of the origin>/checkpoint\n".into(),
        );
    }
    match witness.latest(&origin_hash).await {
        Ok(Some(note)) => text(StatusCode::OK, note),
        Ok(None) => text(
            StatusCode::NOT_FOUND,
            "this witness has cosigned no checkpoint of that log\n".into(),
        ),
        Err(e) => {
            tracing::error!(error = %e, "witness state");
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the witness cannot reach its state; try again later\n".into(),
            )
        }
    }
}
