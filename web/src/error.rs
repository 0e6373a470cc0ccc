//! The web crate's error type, [`WebError`], and how each case becomes an HTTP response.
//!
//! Client mistakes (unknown experiment, bad query parameter) answer 4xx with a message that
//! names the parameter and the fix; failures reading the index, log or blobs answer 500 with a
//! generic message and are logged in full (paths and database URLs stay in the server log).
//! This module does not decide which handler fails how.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Why a request could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// The thing asked for does not exist (unknown experiment, run, entry, path).
    #[error("{what} not found")]
    NotFound {
        /// What was looked up, e.g. `run "run-7"`.
        what: String,
    },
    /// A query parameter or path segment is malformed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The index database failed.
    #[error("index database: {0}")]
    Index(#[from] sqlx::Error),
    /// The ledger (log, blobs, keys) could not be read.
    #[error("ledger: {0}")]
    Ledger(#[from] glassbox_ledger::Error),
    /// A [`crate::ops::MetricsSource`] could not be read.
    #[error("metrics: {0}")]
    Metrics(String),
    /// The [`crate::queue::QueueSource`] could not be read.
    #[error("queue: {0}")]
    Queue(String),
    /// A file could not be read, or the server socket failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        reason: String,
    },
}

impl WebError {
    /// A `NotFound` for `what`.
    pub fn not_found(what: impl Into<String>) -> Self {
        WebError::NotFound { what: what.into() }
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            WebError::NotFound { .. } => StatusCode::NOT_FOUND,
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let status = self.status();
        let text = if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
            "internal error; the server log has the details".to_string()
        } else {
            self.to_string()
        };
        (
            status,
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf-8",
            )],
            format!("{text}\n"),
        )
            .into_response()
    }
}
