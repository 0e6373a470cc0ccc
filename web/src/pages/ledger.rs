//! Ledger: the current signed checkpoint (size, root, signing key), the most recent entries,
//! and how to verify the log yourself with `glassbox verify URL`.
//!
//! The checkpoint is read from `<lab>/log/checkpoint` and its signature checked with the lab's
//! verifier key before it is shown; the entries come from the index.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::HOST;
use glassbox_ledger::index::queries::EntryFilter;
use maud::{Markup, html};

use super::{Nav, experiment_href, frame};
use crate::WebState;
use crate::error::WebError;

/// What the ledger page and `/api/v1/ledger` show about the log.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct LedgerSummary {
    /// The log's origin line.
    pub origin: String,
    /// Entries.
    pub size: u64,
    /// Merkle root, base64 as in the checkpoint.
    pub root: String,
    /// The verifier key (`name+keyid+base64`).
    pub vkey: String,
    /// The signed checkpoint as served at `/log/checkpoint`.
    pub checkpoint: String,
}

/// Reads and checks the checkpoint.
pub async fn summary(st: &WebState) -> Result<LedgerSummary, WebError> {
    let vkey = st.lab.verifier_key()?;
    let note = tokio::fs::read(st.lab.log_dir().join("checkpoint")).await?;
    let signed = vkey
        .verify(&note)
        .map_err(|e| WebError::Ledger(glassbox_ledger::Error::from(e)))?;
    Ok(LedgerSummary {
        origin: signed.checkpoint.origin.clone(),
        size: signed.checkpoint.size.0,
        root: signed.checkpoint.root.to_base64(),
        vkey: vkey.to_string(),
        checkpoint: String::from_utf8_lossy(&note).into_owned(),
    })
}

/// `GET /ledger`.
pub async fn page(State(st): State<WebState>, headers: HeaderMap) -> Result<Markup, WebError> {
    let s = summary(&st).await?;
    let rows = st
        .index
        .select_entries(&EntryFilter {
            newest_first: true,
            limit: Some(50),
            ..EntryFilter::default()
        })
        .await?;
    let recent: Vec<_> = rows
        .into_iter()
        .map(|r| (r.index as i64, r.kind, r.experiment, r.run, r.time))
        .collect();
    // The address people reached us by; shown as text only (escaped), never used otherwise.
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| h.len() < 256)
        .unwrap_or("HOST:PORT");
    let body = html! {
        h1 { "Ledger" }
        p.lead { "Every record of the lab is a leaf of an append-only Merkle tree (RFC 6962, C2SP tlog-tiles), with a signed checkpoint. Anyone can check it." }
        dl.checkpoint {
            dt { "Origin" } dd { code { (s.origin) } }
            dt { "Size" } dd #log-size { (s.size) " entries" }
            dt { "Root" } dd { code.hash { (s.root) } }
            dt { "Signing key" } dd { code.hash #vkey { (s.vkey) } }
        }
        details { summary { "Signed checkpoint" } pre { code { (s.checkpoint) } } }
        h2 { "Verify it yourself" }
        pre { code { "glassbox verify http://" (host) "/ --vkey '" (s.vkey) "'" } }
        p { "This fetches " code { "/log/checkpoint" } ", every tile under " code { "/log/tile/" } " and every referenced blob under " code { "/blobs/" } ", recomputes the tree, checks the signature, and remembers the checkpoint so the next run proves the log only grew." }
        h2 { "Recent entries" }
        table.list #recent {
            thead { tr { th { "Entry" } th { "Kind" } th { "Experiment" } th { "Run" } th { "Time" } th { "Proof" } } }
            tbody { @for (idx, kind, exp, run, time) in &recent { tr {
                td.n { a href={ "/api/v1/entries/" (idx) } { (idx) } }
                td { (kind) }
                td { @if let Some(x) = exp { a href=(experiment_href(x)) { (x) } } }
                td { (run.as_deref().unwrap_or("")) }
                td { (time) }
                td { a href={ "/api/v1/entries/" (idx) "/proof" } { "inclusion proof" } }
            } } }
        }
    };
    Ok(frame("Ledger", Nav::Ledger, false, body))
}
