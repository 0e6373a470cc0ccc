//! Data: the lab's corpora (`dataset` entries: domain, hash, bytes, source, tokenizer, known
//! entropy) and each experiment's mixture weights as its spec states them.
//!
//! Mixtures are listed for the most recently updated experiments, a page at a time.

use axum::extract::{Query, State};
use maud::{Markup, html};

use super::experiments::PageQuery;
use super::{Nav, experiment_href, frame, num, short_hash};
use crate::WebState;
use crate::error::WebError;

/// Experiments whose mixtures one page lists.
const PER_PAGE: usize = 100;

/// `GET /data`.
pub async fn page(
    State(st): State<WebState>,
    Query(p): Query<PageQuery>,
) -> Result<Markup, WebError> {
    let page = p.page.unwrap_or(1).max(1);
    let body = {
        let cat = st.catalog.read(st.index.pool(), st.blobs.as_ref()).await?;
        let mut exps: Vec<_> = cat
            .experiments
            .values()
            .filter(|e| e.spec.as_ref().is_some_and(|s| !s.mixture.is_empty()))
            .collect();
        exps.sort_by_key(|e| std::cmp::Reverse(e.last_entry));
        let total = exps.len();
        html! {
            h1 { "Data" }
            p.lead { "Corpora are content-addressed: a mixture names each by hash (or by a seeded generator) with a weight." }
            h2 { "Corpora" }
            @if cat.datasets.is_empty() { p.empty { "No dataset entries yet." } }
            @else {
                table.list #datasets {
                    thead { tr { th { "Entry" } th { "Domain" } th { "Hash" } th { "Bytes" } th { "Source" } th { "Tokenizer" } th { "Entropy (bits/byte)" } } }
                    tbody { @for d in &cat.datasets { tr {
                        td.n { a href={ "/api/v1/entries/" (d.entry) } { (d.entry) } }
                        td { (d.domain) }
                        td { @if let Some(h) = &d.corpus { (short_hash(h)) } }
                        td.n { (d.bytes) }
                        td { (d.source) }
                        td { (d.tokenizer) }
                        td.n { (num(d.entropy_bits_per_byte)) }
                    } } }
                }
            }
            h2 { "Mixtures" }
            table.list #mixtures {
                thead { tr { th { "Experiment" } th { "Domain" } th { "Weight" } th { "Corpus or generator" } } }
                tbody { @for e in exps.iter().skip((page - 1) * PER_PAGE).take(PER_PAGE) {
                    @let mix = e.spec.as_ref().map(|s| s.mixture.as_slice()).unwrap_or(&[]);
                    @for (i, c) in mix.iter().enumerate() { tr {
                        td { @if i == 0 { a href=(experiment_href(&e.id)) { (e.id) } } }
                        td { (c.domain) }
                        td.n { (num(Some(c.weight))) }
                        td { @if c.source.starts_with("blake3:") { (short_hash(&c.source)) } @else { (c.source) } }
                    } }
                } }
            }
            nav.pager {
                @if page > 1 { a href={ "/data?page=" (page - 1) } { "← previous" } }
                span { "page " (page) " of " (total.div_ceil(PER_PAGE).max(1)) }
                @if page * PER_PAGE < total { a href={ "/data?page=" (page + 1) } { "next →" } }
            }
        }
    };
    Ok(frame("Data", Nav::Data, false, body))
}
