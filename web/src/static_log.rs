//! The log's static read API: the lab's public files served as they are stored, in exactly the
//! layout `glassbox_ledger::source::HttpSource` reads, so `glassbox verify http://host:port/`
//! audits a running server.
//!
//! - `/log/checkpoint` — the signed checkpoint (`Cache-Control: no-cache`: it changes);
//! - `/log/tile/<L>/<N>[.p/<W>]`, `/log/tile/entries/<N>[.p/<W>]` — C2SP tlog-tiles hash tiles
//!   and entry bundles; a full tile never changes (`immutable`), a partial one (`.p/`) does;
//! - `/vkey` — the verifier key;
//! - `/blobs/<2 hex>/<62 hex>` and `/blobs/blake3:<64 hex>` — blobs, `immutable` (a blob's
//!   name is the hash of its bytes), streamed in chunks from the lab's blob store (its
//!   directory or the object store the server was given).
//!
//! The log's files come from the lab directory, or from the bucket when the lab keeps its blobs
//! in one: the integrator copies each checkpoint there with its tiles
//! (`glassbox_ledger::Mirror`), so a server without the lab directory serves the same log.
//!
//! Every path is parsed against the layout's grammar before touching the file system; anything
//! else (`..`, a key file, a stray name) is 404. Nothing here writes, and nothing outside
//! `log/`, `blobs/` and `vkey` is ever served: `keys/ledger.key` has no route.

use std::io::Read;
use std::path::PathBuf;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use glassbox_ledger::source::ReadLimit;
use glassbox_ledger::tiles::{TileId, TileKind};
use glassbox_schemas::BlobHash;

use crate::WebState;
use crate::error::WebError;

/// `Cache-Control` of content addressed by hash or fixed by the tree's history.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// `Cache-Control` of content that changes as the log grows.
pub const NO_CACHE: &str = "no-cache";

/// Bytes per read when streaming a blob.
const STREAM_CHUNK: usize = 256 * 1024;

/// The routes of this module.
pub fn routes() -> Router<WebState> {
    Router::new()
        .route("/log/checkpoint", get(checkpoint))
        .route("/log/tile/{*path}", get(tile))
        .route("/vkey", get(vkey))
        .route("/blobs/{hash}", get(blob_by_hash))
        .route("/blobs/{prefix}/{rest}", get(blob_by_path))
}

/// A tile path's kind, once it parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum TilePath {
    /// A full tile: never changes.
    Full,
    /// A partial tile (`.p/<W>`): replaced as the log grows.
    Partial,
}

fn is_digits(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_digit())
}

/// Checks `path` (below `log/tile/`) against the C2SP grammar: `<L>/<N>[.p/<W>]` or
/// `entries/<N>[.p/<W>]`, where `<N>` is 3-digit groups, all but the last prefixed by `x`.
pub fn parse_tile_path(path: &str) -> Option<TilePath> {
    let mut segs: Vec<&str> = path.split('/').collect();
    let first = segs.first()?;
    if !(*first == "entries" || (first.len() <= 2 && is_digits(first, first.len()))) {
        return None;
    }
    let mut kind = TilePath::Full;
    // A partial tile ends in `<last group>.p/<W>` with 1 <= W <= 255.
    if segs.len() >= 3 && segs[segs.len() - 2].ends_with(".p") {
        let w = segs.pop()?;
        if w.is_empty() || w.len() > 3 || !w.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let w: u32 = w.parse().ok()?;
        if !(1..=255).contains(&w) {
            return None;
        }
        let last = segs.pop()?;
        segs.push(last.strip_suffix(".p")?);
        kind = TilePath::Partial;
    }
    let groups = &segs[1..];
    let (last, rest) = groups.split_last()?;
    if !is_digits(last, 3) {
        return None;
    }
    for g in rest {
        if !(g.len() == 4 && g.starts_with('x') && is_digits(&g[1..], 3)) {
            return None;
        }
    }
    Some(kind)
}

fn is_lower_hex(s: &str, n: usize) -> bool {
    s.len() == n
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

async fn small_file(path: PathBuf, cache: &'static str, ctype: &'static str) -> Response {
    match tokio::fs::read(&path).await {
        Ok(bytes) => (
            [
                (header::CACHE_CONTROL, cache),
                (header::CONTENT_TYPE, ctype),
            ],
            bytes,
        )
            .into_response(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            WebError::not_found("file").into_response()
        }
        Err(e) => WebError::Io(e).into_response(),
    }
}

/// A file of the public layout (`log/checkpoint`, `vkey`, a tile): read from the bucket when
/// the lab keeps its blobs in one (the integrator copies the log there, so any server of the
/// lab serves the same log, whether or not it holds the lab directory), else from the lab
/// directory.
async fn public_file(
    st: &WebState,
    rel: String,
    limit: ReadLimit,
    cache: &'static str,
    ctype: &'static str,
) -> Response {
    if st.blobs.bucket().is_none() {
        return small_file(st.lab.root().join(&rel), cache, ctype).await;
    }
    let blobs = st.blobs.clone();
    let read = tokio::task::spawn_blocking(move || match blobs.bucket() {
        Some(bucket) => bucket.read(&rel, limit),
        None => Ok(None),
    })
    .await;
    match read {
        Ok(Ok(Some(bytes))) => (
            [
                (header::CACHE_CONTROL, cache),
                (header::CONTENT_TYPE, ctype),
            ],
            bytes,
        )
            .into_response(),
        Ok(Ok(None)) => WebError::not_found("file").into_response(),
        Ok(Err(e)) => WebError::Ledger(e).into_response(),
        Err(e) => WebError::Io(std::io::Error::other(e)).into_response(),
    }
}

async fn checkpoint(State(st): State<WebState>) -> Response {
    public_file(
        &st,
        "log/checkpoint".into(),
        ReadLimit::CHECKPOINT,
        NO_CACHE,
        "text/plain; charset=utf-8",
    )
    .await
}

async fn vkey(State(st): State<WebState>) -> Response {
    public_file(
        &st,
        "vkey".into(),
        ReadLimit::VKEY,
        NO_CACHE,
        "text/plain; charset=utf-8",
    )
    .await
}

async fn tile(State(st): State<WebState>, Path(path): Path<String>) -> Response {
    let Some(kind) = parse_tile_path(&path) else {
        return WebError::not_found("tile").into_response();
    };
    let cache = match kind {
        TilePath::Full => IMMUTABLE,
        TilePath::Partial => NO_CACHE,
    };
    // The most a tile of any width may hold: an entry bundle of 256 entries.
    let limit = ReadLimit::tile(TileId {
        kind: TileKind::Entries,
        index: 0,
        width: 256,
    });
    public_file(
        &st,
        format!("log/tile/{path}"),
        limit,
        cache,
        "application/octet-stream",
    )
    .await
}

async fn blob_by_hash(State(st): State<WebState>, Path(hash): Path<String>) -> Response {
    match hash.strip_prefix("blake3:") {
        Some(hex) if is_lower_hex(hex, 64) => stream_blob(&st, hex).await,
        _ => WebError::not_found("blob").into_response(),
    }
}

async fn blob_by_path(
    State(st): State<WebState>,
    Path((prefix, rest)): Path<(String, String)>,
) -> Response {
    if is_lower_hex(&prefix, 2) && is_lower_hex(&rest, 62) {
        stream_blob(&st, &format!("{prefix}{rest}")).await
    } else {
        WebError::not_found("blob").into_response()
    }
}

/// Streams blob `hex` (already checked to be 64 lowercase hex digits) from the lab's blob
/// store — its directory or an object store — through a blocking reader on the blocking pool,
/// two chunks ahead of the client at most.
async fn stream_blob(st: &WebState, hex: &str) -> Response {
    let Ok(hash) = format!("blake3:{hex}").parse::<BlobHash>() else {
        return WebError::not_found("blob").into_response();
    };
    let blobs = st.blobs.clone();
    let open = tokio::task::spawn_blocking(move || -> Result<_, glassbox_ledger::Error> {
        match blobs.size(&hash)? {
            None => Ok(None),
            Some(len) => Ok(Some((len, blobs.get(&hash)?))),
        }
    })
    .await;
    let (len, mut reader) = match open {
        Ok(Ok(Some(found))) => found,
        Ok(Ok(None)) | Ok(Err(glassbox_ledger::Error::BlobNotFound { .. })) => {
            return WebError::not_found(format!("blob blake3:{hex}")).into_response();
        }
        Ok(Err(e)) => return WebError::Ledger(e).into_response(),
        Err(e) => return WebError::Io(std::io::Error::other(e)).into_response(),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(2);
    tokio::task::spawn_blocking(move || {
        loop {
            let mut buf = vec![0u8; STREAM_CHUNK];
            let item = match reader.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    Ok(buf)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
            let failed = item.is_err();
            // A closed channel means the client went away: stop reading.
            if tx.blocking_send(item).is_err() || failed {
                return;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut resp = Body::from_stream(stream).into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Ok(v) = HeaderValue::from_str(&format!("\"blake3:{hex}\"")) {
        h.insert(header::ETAG, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_paths_follow_the_c2sp_grammar() {
        assert_eq!(parse_tile_path("0/000"), Some(TilePath::Full));
        assert_eq!(parse_tile_path("0/x001/x234/067"), Some(TilePath::Full));
        assert_eq!(parse_tile_path("1/000.p/5"), Some(TilePath::Partial));
        assert_eq!(parse_tile_path("entries/000"), Some(TilePath::Full));
        assert_eq!(
            parse_tile_path("entries/x001/002.p/255"),
            Some(TilePath::Partial)
        );
        for bad in [
            "",
            "0",
            "../keys/ledger.key",
            "0/../../keys",
            "0/00",
            "0/0000",
            "0/001/002",
            "0/000.p/0",
            "0/000.p/256",
            "0/000.p/",
            "entries/000.p/5/6",
            "keys/000",
            "0/x01/000",
            "0/000.p/5x",
        ] {
            assert_eq!(parse_tile_path(bad), None, "{bad}");
        }
    }
}
