//! The API's path and query extractors: axum's [`Path`] and [`Query`], with a malformed value
//! answered as a [`WebError::BadRequest`] that names the parameter, the value given and what is
//! accepted (`path parameter idx = "-1": must be a whole number from 0 to 9223372036854775807`),
//! rather than axum's bare text. Not here: bounds a well-formed value must also keep (the
//! handlers check those with [`at_most`] and name them in the OpenAPI document).

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query, RawPathParams};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::WebError;

/// The largest step, count or index the API accepts: 2^53 - 1, the largest integer every JSON
/// client holds exactly (a JavaScript number), well inside the index database's 64-bit
/// columns. The OpenAPI document names it as each such parameter's `maximum`.
pub const MAX_INTEGER: u64 = (1 << 53) - 1;

/// [`Path`], rejected as a [`WebError`].
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

/// [`Query`], rejected as a [`WebError`].
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(e) => {
                // A single value's error carries no name: the route's own names it.
                let names: Vec<String> = RawPathParams::from_request_parts(parts, state)
                    .await
                    .map(|raw| raw.iter().map(|(k, _)| k.to_string()).collect())
                    .unwrap_or_default();
                Err(path_error(&e, &names))
            }
        }
    }
}

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(e) => Err(query_error(&e)),
        }
    }
}

/// What a Rust type accepts, in words.
fn accepted(expected_type: &str) -> String {
    match expected_type {
        "u64" | "usize" => format!("a whole number from 0 to {MAX_INTEGER}"),
        "u32" => format!("a whole number from 0 to {}", u32::MAX),
        "i64" => "a whole number".into(),
        other => format!("a value of type {other}"),
    }
}

fn path_error(e: &PathRejection, names: &[String]) -> WebError {
    use axum::extract::path::ErrorKind;
    let PathRejection::FailedToDeserializePathParams(inner) = e else {
        return WebError::BadRequest(format!("path: {}", e.body_text()));
    };
    WebError::BadRequest(match inner.kind() {
        ErrorKind::ParseErrorAtKey {
            key,
            value,
            expected_type,
        } => format!(
            "path parameter {key} = {value:?}: must be {}",
            accepted(expected_type)
        ),
        ErrorKind::ParseErrorAtIndex {
            index,
            value,
            expected_type,
        } => match names.get(*index) {
            Some(key) => format!(
                "path parameter {key} = {value:?}: must be {}",
                accepted(expected_type)
            ),
            None => format!(
                "path segment {} = {value:?}: must be {}",
                index + 1,
                accepted(expected_type)
            ),
        },
        ErrorKind::ParseError {
            value,
            expected_type,
        } => match names {
            [key] => format!(
                "path parameter {key} = {value:?}: must be {}",
                accepted(expected_type)
            ),
            _ => format!("path = {value:?}: must be {}", accepted(expected_type)),
        },
        _ => format!("path: {}", inner.body_text()),
    })
}

fn query_error(e: &QueryRejection) -> WebError {
    // serde_urlencoded's message names the parameter when a value does not parse
    // (`limit: invalid digit found in string`); axum prefixes it with its own words.
    let text = e.body_text();
    let text = text
        .strip_prefix("Failed to deserialize query string: ")
        .unwrap_or(&text);
    WebError::BadRequest(format!("query string: {text}"))
}

/// `value` if it is at most `max`, else a 400 naming the parameter and the bound.
pub fn at_most(name: &str, value: u64, max: u64) -> Result<u64, WebError> {
    if value > max {
        return Err(WebError::BadRequest(format!(
            "{name} = {value}: must be at most {max}"
        )));
    }
    Ok(value)
}

/// `value` if it is within `min..=max`, else a 400 naming the parameter and the range.
pub fn within(name: &str, value: u64, min: u64, max: u64) -> Result<u64, WebError> {
    if !(min..=max).contains(&value) {
        return Err(WebError::BadRequest(format!(
            "{name} = {value}: must be from {min} to {max}"
        )));
    }
    Ok(value)
}
