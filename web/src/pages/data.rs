//! Data: the lab's corpora, tokenizers and token shards, and what runs drew from them.
//!
//! - `/data` — every corpus (`dataset` entries: domain, format, bytes, documents, tokens under
//!   each tokenizer), every tokenizer, and each experiment's mixture as its spec states it;
//! - `/data/corpora/{hash}` — one corpus: its facts, the tokens it makes under each tokenizer it
//!   was tokenized with, the runs whose spec names it, and a document viewer (a page per
//!   document, with token boundaries for a chosen tokenizer from its shard's byte counts);
//! - `/data/runs/{run}` — a run's planned mixture next to the tokens it actually drew per
//!   domain, with a stacked chart of `data/<domain>/tokens` over steps.
//!
//! The loaders here ([`dataset_detail`], [`document_view`], [`run_data`]) are what the JSON API
//! serves too. Every string from a corpus is escaped by maud; documents and shards are read
//! with bounds ([`MAX_VIEW_BLOB_BYTES`], [`MAX_VIEW_TOKENS`]). Read-only.

use std::collections::BTreeMap;
use std::io::Read;

use axum::extract::{Path, Query, State};
use glassbox_corpus::TokenShard;
use glassbox_corpus::documents;
use glassbox_schemas::BlobHash;
use glassbox_schemas::data::CorpusFormat;
use maud::{Markup, PreEscaped, html};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::experiments::PageQuery;
use super::{Nav, encode_path, experiment_href, frame, num, short_hash};
use crate::WebState;
use crate::catalog::{CatalogData, DatasetRow, TokenizedRow};
use crate::chart::escape_xml;
use crate::error::WebError;
use crate::series;

/// Experiments whose mixtures one page lists.
const PER_PAGE: usize = 100;

/// Largest corpus or shard blob the document viewer reads (256 MiB): bigger ones are
/// described, not opened, by the dashboard.
pub const MAX_VIEW_BLOB_BYTES: u64 = 256 << 20;

/// Tokens of one document the viewer marks (the rest of the text is shown unmarked).
pub const MAX_VIEW_TOKENS: usize = 4096;

/// Characters of one document the viewer shows.
pub const MAX_VIEW_CHARS: usize = 65_536;

/// One corpus with what was made of it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DatasetDetail {
    /// The `dataset` entry.
    pub dataset: DatasetRow,
    /// Its token shards, one per tokenizer it was tokenized with.
    pub tokenized: Vec<TokenizedRow>,
    /// Runs whose spec names it, oldest first.
    pub runs: Vec<String>,
}

/// One document of a corpus, with its tokens under a tokenizer when one was asked for.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DocumentView {
    /// The corpus.
    pub corpus: String,
    /// The document, 0-based (empty documents are not counted).
    pub document: u64,
    /// Documents in the corpus, when its entry says.
    pub documents: Option<u64>,
    /// The text (cut at [`MAX_VIEW_CHARS`] characters).
    pub text: String,
    /// Whether the text was cut.
    pub truncated: bool,
    /// The tokenizer whose boundaries are shown.
    pub tokenizer: Option<String>,
    /// Its tokens: id and byte span in `text` (up to [`MAX_VIEW_TOKENS`]).
    pub tokens: Vec<TokenSpan>,
    /// Tokens the document has under that tokenizer (its end-of-document token included).
    pub token_count: Option<u64>,
}

/// A token of a document: its id and the bytes of the text it stands for.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenSpan {
    /// Token id.
    pub id: u32,
    /// First byte in the text.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// A run's data: the mixture it planned and the tokens it drew.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunConsumption {
    /// The run.
    pub run: String,
    /// Its tokenizer, when it had a stored one.
    pub tokenizer: Option<String>,
    /// Per domain, in spec order.
    pub domains: Vec<DomainUse>,
    /// `data/<domain>/tokens` over steps, per domain: (step, tokens so far).
    pub series: BTreeMap<String, Vec<(u64, f64)>>,
}

/// One domain of a run: planned and drawn.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DomainUse {
    /// Domain.
    pub domain: String,
    /// The corpus hash or the generator.
    pub source: String,
    /// The weight in the spec.
    pub weight: f64,
    /// The weight over the sum of weights: the expected fraction of tokens.
    pub planned_fraction: f64,
    /// Tokens drawn (the last `data/<domain>/tokens`).
    pub tokens: Option<f64>,
    /// Their fraction of all tokens drawn.
    pub drawn_fraction: Option<f64>,
    /// The token shard it drew from, for a run with a stored tokenizer.
    pub shard: Option<String>,
}

/// `?doc=&tokenizer=` of the document viewer.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DocQuery {
    /// Document, 0-based (default 0).
    #[param(minimum = 0, maximum = 9007199254740991.0)]
    pub doc: Option<u64>,
    /// A tokenizer hash whose token boundaries to show.
    pub tokenizer: Option<String>,
}

fn parse_hash(h: &str) -> Result<BlobHash, WebError> {
    h.parse::<BlobHash>()
        .map_err(|e| WebError::BadRequest(format!("{h:?} is not a hash: {e}")))
}

/// The corpus `hash` with its tokenizations and runs.
pub fn dataset_detail(cat: &CatalogData, hash: &str) -> Result<DatasetDetail, WebError> {
    let dataset = cat
        .datasets
        .iter()
        .find(|d| d.corpus.as_deref() == Some(hash))
        .cloned()
        .ok_or_else(|| {
            WebError::not_found(format!("corpus {hash} (no dataset entry declares it)"))
        })?;
    let tokenized = cat
        .tokenized
        .iter()
        .filter(|t| t.corpus == hash)
        .cloned()
        .collect();
    let runs = cat
        .runs
        .values()
        .filter(|r| {
            cat.spec_facts(&r.spec_hash)
                .is_some_and(|s| s.mixture.iter().any(|m| m.source == hash))
        })
        .map(|r| r.id.clone())
        .collect();
    Ok(DatasetDetail {
        dataset,
        tokenized,
        runs,
    })
}

/// Reads a whole blob of at most [`MAX_VIEW_BLOB_BYTES`], re-hashed.
fn read_blob(st: &WebState, hash: &BlobHash, what: &str) -> Result<Vec<u8>, WebError> {
    let size = st
        .blobs
        .size(hash)?
        .ok_or_else(|| WebError::not_found(format!("{what} {hash} in the blob store")))?;
    if size > MAX_VIEW_BLOB_BYTES {
        return Err(WebError::BadRequest(format!(
            "{what} {hash} is {size} bytes; the dashboard opens blobs of at most {MAX_VIEW_BLOB_BYTES} bytes (fetch it from /blobs/ instead)"
        )));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    st.blobs
        .get(hash)?
        .take(MAX_VIEW_BLOB_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| WebError::BadRequest(format!("cannot read {what} {hash}: {e}")))?;
    if glassbox_schemas::Blake3Hash::of(&bytes) != hash.0 {
        return Err(WebError::BadRequest(format!(
            "{what} {hash} in the blob store does not hash to its name"
        )));
    }
    Ok(bytes)
}

/// Document `doc` of corpus `hash`, with token boundaries under `tokenizer` when given (from
/// the shard of that pair).
pub fn document_view(
    st: &WebState,
    dataset: &DatasetDetail,
    doc: u64,
    tokenizer: Option<&str>,
) -> Result<DocumentView, WebError> {
    let hash_text = dataset.dataset.corpus.clone().unwrap_or_default();
    let hash = parse_hash(&hash_text)?;
    let format = dataset
        .dataset
        .format
        .clone()
        .unwrap_or(CorpusFormat::Text { separator: None });
    let bytes = read_blob(st, &hash, "corpus")?;
    let mut file = tempfile_with(&bytes)?;
    use std::io::Seek;
    file.rewind()
        .map_err(|e| WebError::BadRequest(format!("cannot read corpus {hash}: {e}")))?;
    let text = documents::nth(file, &hash_text, &format, doc)
        .map_err(|e| WebError::BadRequest(e.to_string()))?
        .ok_or_else(|| {
            WebError::not_found(format!("document {doc} (counted from 0) of corpus {hash}"))
        })?;
    let mut view = DocumentView {
        corpus: hash_text.clone(),
        document: doc,
        documents: dataset.dataset.documents,
        text: String::new(),
        truncated: false,
        tokenizer: None,
        tokens: Vec::new(),
        token_count: None,
    };
    if let Some(t) = tokenizer.filter(|t| !t.is_empty()) {
        let row = dataset
            .tokenized
            .iter()
            .find(|r| r.tokenizer == t)
            .ok_or_else(|| {
                WebError::not_found(format!("a token shard of corpus {hash} with tokenizer {t}"))
            })?;
        let shard_hash = parse_hash(&row.shard)?;
        let shard = TokenShard::from_bytes(&read_blob(st, &shard_hash, "token shard")?, &row.shard)
            .map_err(|e| WebError::BadRequest(e.to_string()))?;
        let range = shard.document(doc as usize).ok_or_else(|| {
            WebError::not_found(format!("document {doc} in token shard {shard_hash}"))
        })?;
        view.tokenizer = Some(t.to_string());
        view.token_count = Some(range.len() as u64);
        let mut at = 0u64;
        for (i, b) in range
            .clone()
            .zip(shard.byte_counts(range))
            .take(MAX_VIEW_TOKENS)
        {
            view.tokens.push(TokenSpan {
                id: shard.ids()[i],
                start: at,
                end: at + b,
            });
            at += b;
        }
    }
    let cut = text
        .char_indices()
        .nth(MAX_VIEW_CHARS)
        .map_or(text.len(), |(i, _)| i);
    view.truncated = cut < text.len();
    view.text = text[..cut].to_string();
    Ok(view)
}

/// A temporary file holding `bytes` (Parquet is read from a seekable file).
fn tempfile_with(bytes: &[u8]) -> Result<std::fs::File, WebError> {
    use std::io::Write;
    let mut f = tempfile::tempfile()
        .map_err(|e| WebError::BadRequest(format!("cannot create a temporary file: {e}")))?;
    f.write_all(bytes)
        .map_err(|e| WebError::BadRequest(format!("cannot write a temporary file: {e}")))?;
    Ok(f)
}

/// Run `run`'s planned mixture and drawn tokens.
pub async fn run_data(st: &WebState, run: &str) -> Result<RunConsumption, WebError> {
    let (spec_hash, mixture, tokenizer, shards, finals) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let r = cat
            .runs
            .get(run)
            .ok_or_else(|| WebError::not_found(format!("run {run:?}")))?;
        let mixture = cat
            .spec_facts(&r.spec_hash)
            .map(|s| s.mixture.clone())
            .unwrap_or_default();
        (
            r.spec_hash.clone(),
            mixture,
            r.tokenizer.clone(),
            r.shards.clone(),
            r.final_metrics.clone(),
        )
    };
    let _ = spec_hash;
    let mut series_by = BTreeMap::new();
    for m in &mixture {
        let name = glassbox_schemas::metrics::data_tokens(&m.domain);
        let points = series::one_series(&st.index, &st.live, run, &name, 0, u64::MAX).await?;
        series_by.insert(m.domain.clone(), points);
    }
    let total_weight: f64 = mixture.iter().map(|m| m.weight).sum();
    let last = |d: &str| {
        series_by
            .get(d)
            .and_then(|p: &Vec<(u64, f64)>| p.last().map(|x| x.1))
            .or_else(|| {
                finals
                    .get(&glassbox_schemas::metrics::data_tokens(d))
                    .copied()
            })
    };
    let drawn_total: f64 = mixture.iter().filter_map(|m| last(&m.domain)).sum();
    let domains = mixture
        .iter()
        .map(|m| {
            let tokens = last(&m.domain);
            DomainUse {
                domain: m.domain.clone(),
                source: m.source.clone(),
                weight: m.weight,
                planned_fraction: if total_weight > 0.0 {
                    m.weight / total_weight
                } else {
                    0.0
                },
                tokens,
                drawn_fraction: tokens
                    .filter(|_| drawn_total > 0.0)
                    .map(|t| t / drawn_total),
                shard: shards.get(&m.domain).cloned(),
            }
        })
        .collect();
    Ok(RunConsumption {
        run: run.to_string(),
        tokenizer,
        domains,
        series: series_by,
    })
}

/// `GET /data`.
pub async fn page(
    State(st): State<WebState>,
    Query(p): Query<PageQuery>,
) -> Result<Markup, WebError> {
    let page = p.page.unwrap_or(1).max(1);
    let body = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let mut exps: Vec<_> = cat
            .experiments
            .values()
            .filter(|e| e.spec.as_ref().is_some_and(|s| !s.mixture.is_empty()))
            .collect();
        exps.sort_by_key(|e| std::cmp::Reverse(e.last_entry));
        let total = exps.len();
        html! {
            h1 { "Data" }
            p.lead { "Corpora are content-addressed: a mixture names each by hash (or by a seeded generator) with a weight. A stored tokenizer turns a corpus into a token shard, also by hash." }
            h2 { "Corpora" }
            @if cat.datasets.is_empty() { p.empty { "No dataset entries yet." } }
            @else {
                table.list #datasets {
                    thead { tr { th { "Entry" } th { "Domain" } th { "Hash" } th { "Format" } th { "Bytes" } th { "Documents" } th { "Tokens" } th { "Source" } th { "Entropy (bits/byte)" } } }
                    tbody { @for d in &cat.datasets { tr {
                        td.n { a href={ "/api/v1/entries/" (d.entry) } { (d.entry) } }
                        td { (d.domain) }
                        td { @if let Some(h) = &d.corpus { a href={ "/data/corpora/" (h) } { (short_hash(h)) } } }
                        td { (d.format.as_ref().map_or("bytes", |f| f.name())) }
                        td.n { (d.bytes) }
                        td.n { @if let Some(n) = d.documents { (n) } }
                        td.n {
                            @let shards: Vec<_> = cat.tokenized.iter().filter(|t| Some(&t.corpus) == d.corpus.as_ref()).collect();
                            @if shards.is_empty() {
                                span title="under the bytes tokenizer (a spec without data.tokenizer): one token per byte of text" {
                                    (super::count(d.text_bytes.unwrap_or(d.bytes) as f64)) " (bytes)"
                                }
                            }
                            @for t in shards { span title={ "under tokenizer " (t.tokenizer) } { (super::count(t.tokens as f64)) } " " }
                        }
                        td { (d.source) }
                        td.n { (num(d.entropy_bits_per_byte)) }
                    } } }
                }
            }
            h2 { "Tokenizers" }
            @if cat.tokenizers.is_empty() { p.empty { "No tokenizer entries yet: runs use the bytes tokenizer." } }
            @else {
                table.list #tokenizers {
                    thead { tr { th { "Entry" } th { "Hash" } th { "Kind" } th { "Model" } th { "Vocab" } th { "End of document" } th { "Trained on" } th { "Source" } } }
                    tbody { @for t in &cat.tokenizers { tr {
                        td.n { a href={ "/api/v1/entries/" (t.entry) } { (t.entry) } }
                        td { (short_hash(&t.hash)) }
                        td { (t.kind) }
                        td { (t.model) }
                        td.n { (t.vocab_size) }
                        td { code { (t.end_of_document) } }
                        td { @for c in &t.trained_on { a href={ "/data/corpora/" (c) } { (short_hash(c)) } " " } }
                        td { (t.source) }
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
                        td { @if c.source.starts_with("blake3:") { a href={ "/data/corpora/" (c.source) } { (short_hash(&c.source)) } } @else { (c.source) } }
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

/// `GET /data/corpora/{hash}`: one corpus and its document viewer.
pub async fn corpus_page(
    State(st): State<WebState>,
    Path(hash): Path<String>,
    Query(q): Query<DocQuery>,
) -> Result<Markup, WebError> {
    let (detail, bytes_runs) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let detail = dataset_detail(&cat, &hash)?;
        // The runs that read it as bytes: no stored tokenizer in their `run_started`.
        let bytes_runs: Vec<String> = detail
            .runs
            .iter()
            .filter(|r| cat.runs.get(*r).is_some_and(|x| x.tokenizer.is_none()))
            .cloned()
            .collect();
        (detail, bytes_runs)
    };
    let doc = q.doc.unwrap_or(0);
    let tokenizer = q
        .tokenizer
        .clone()
        .or_else(|| detail.tokenized.first().map(|t| t.tokenizer.clone()));
    let st2 = st.clone();
    let d2 = detail.clone();
    let tok2 = tokenizer.clone();
    let view = tokio::task::spawn_blocking(move || document_view(&st2, &d2, doc, tok2.as_deref()))
        .await
        .map_err(|e| WebError::BadRequest(format!("the document viewer failed: {e}")))?;
    let d = &detail.dataset;
    let body = html! {
        h1 { "Corpus " (short_hash(&hash)) }
        table.facts #corpus-facts {
            tr { th { "Domain" } td { (d.domain) } }
            tr { th { "Hash" } td { code { (hash) } } }
            tr { th { "Format" } td { (d.format.as_ref().map_or("bytes", |f| f.name())) } }
            tr { th { "Source" } td { (d.source) } }
            tr { th { "Bytes" } td.n { (d.bytes) } }
            @if let Some(n) = d.documents { tr { th { "Documents" } td.n { (n) } } }
            @if let Some(n) = d.text_bytes { tr { th { "Text bytes" } td.n { (n) } } }
            tr { th { "Entry" } td { a href={ "/api/v1/entries/" (d.entry) } { (d.entry) } } }
        }
        h2 { "Tokens" }
        @if detail.tokenized.is_empty() {
            p.empty #bytes-tokens {
                "Not tokenized with a stored tokenizer. Under the bytes tokenizer (a spec without "
                code { "data.tokenizer" } ") each byte is one token: "
                (super::count(d.text_bytes.unwrap_or(d.bytes) as f64)) " tokens."
                @if !bytes_runs.is_empty() { " Runs that read it so: " (bytes_runs.join(", ")) "." }
            }
        }
        @else {
            table.list #corpus-tokens {
                thead { tr { th { "Tokenizer" } th { "Tokens" } th { "Bytes per token" } th { "Shard" } } }
                tbody { @for t in &detail.tokenized { tr {
                    td { a href={ "/data/corpora/" (hash) "?tokenizer=" (t.tokenizer) } { (short_hash(&t.tokenizer)) } }
                    td.n { (t.tokens) }
                    td.n { (format!("{:.3}", t.text_bytes as f64 / t.tokens.max(1) as f64)) }
                    td { (short_hash(&t.shard)) }
                } } }
            }
        }
        h2 { "Runs that used it" }
        @if detail.runs.is_empty() { p.empty { "No run has named it yet." } }
        @else { ul #corpus-runs { @for r in &detail.runs { li { a href={ "/data/runs/" (encode_path(r)) } { (r) } } } } }
        h2 { "Document " (doc + 1) @if let Some(n) = view.as_ref().ok().and_then(|v| v.documents) { " of " (super::count(n as f64)) } }
        @match &view {
            Err(e) => { p.empty #document-error { (e.to_string()) } }
            Ok(v) => {
                p {
                    @if let Some(t) = &v.tokenizer {
                        "Token boundaries under " (short_hash(t)) ": " (v.token_count.unwrap_or(0)) " tokens."
                    } @else if !bytes_runs.is_empty() {
                        "Read as bytes by " (bytes_runs.join(", ")) ": every byte is one token (no stored tokenizer)."
                    } @else { "No stored tokenizer has tokenized this corpus; under the bytes tokenizer every byte is one token." }
                    @if v.truncated { " The text is cut at " (MAX_VIEW_CHARS) " characters." }
                }
                pre.document #document { (token_markup(v)) }
                nav.pager {
                    @if doc > 0 { a href=(doc_href(&hash, doc - 1, v.tokenizer.as_deref())) { "← previous" } }
                    span { "document " (doc + 1) @if let Some(n) = v.documents { " of " (super::count(n as f64)) } }
                    @if v.documents.is_none_or(|n| doc + 1 < n) { a #next-document href=(doc_href(&hash, doc + 1, v.tokenizer.as_deref())) { "next →" } }
                }
            }
        }
    };
    Ok(frame("Corpus", Nav::Data, false, body))
}

fn doc_href(hash: &str, doc: u64, tokenizer: Option<&str>) -> String {
    match tokenizer {
        Some(t) => format!("/data/corpora/{hash}?doc={doc}&tokenizer={t}"),
        None => format!("/data/corpora/{hash}?doc={doc}"),
    }
}

/// The document's text with each token in a span (escaped by maud), alternating classes so
/// boundaries show; text past the marked tokens is shown plain.
fn token_markup(v: &DocumentView) -> Markup {
    let text = v.text.as_str();
    let piece = |a: u64, b: u64| {
        text.get(a as usize..b.min(text.len() as u64) as usize)
            .unwrap_or("")
            .to_string()
    };
    let marked_end = v.tokens.last().map_or(0, |t| t.end).min(text.len() as u64);
    html! {
        @for (i, t) in v.tokens.iter().enumerate() {
            @if t.end > t.start && t.start < text.len() as u64 {
                span class=(if i % 2 == 0 { "tok a" } else { "tok b" }) title={ "id " (t.id) } { (piece(t.start, t.end)) }
            }
        }
        (piece(marked_end, text.len() as u64))
    }
}

/// `GET /data/runs/{run}`: planned mixture against drawn tokens, with the stacked chart.
pub async fn run_page(
    State(st): State<WebState>,
    Path(run): Path<String>,
) -> Result<Markup, WebError> {
    let data = run_data(&st, &run).await?;
    let body = html! {
        h1 { "Data of " (run) }
        p { a href={ "/runs/" (encode_path(&run)) } { "the run's page" } }
        @if let Some(t) = &data.tokenizer { p { "Tokenizer " (short_hash(t)) } }
        table.list #run-mixture {
            thead { tr { th { "Domain" } th { "Source" } th { "Weight" } th { "Planned share" } th { "Tokens drawn" } th { "Drawn share" } th { "Shard" } } }
            tbody { @for d in &data.domains { tr {
                td { (d.domain) }
                td { @if d.source.starts_with("blake3:") { a href={ "/data/corpora/" (d.source) } { (short_hash(&d.source)) } } @else { (d.source) } }
                td.n { (num(Some(d.weight))) }
                td.n { (format!("{:.1}%", 100.0 * d.planned_fraction)) }
                td.n { (d.tokens.map(super::count).unwrap_or_else(|| "–".into())) }
                td.n { @if let Some(f) = d.drawn_fraction { (format!("{:.1}%", 100.0 * f)) } }
                td { @if let Some(s) = &d.shard { (short_hash(s)) } }
            } } }
        }
        h2 { "Tokens drawn per domain" }
        div.chart #consumption { (PreEscaped(stacked_chart(&data))) }
    };
    Ok(frame("Run data", Nav::Data, false, body))
}

/// Fill colours of the stacked areas, by domain order.
const COLOURS: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1",
];

/// An SVG stacked area chart of `data/<domain>/tokens` over steps (domains in spec order, the
/// first at the bottom), with a legend. Every text is XML-escaped.
pub fn stacked_chart(data: &RunConsumption) -> String {
    let (w, h, pad) = (640.0, 280.0, 40.0);
    let steps: Vec<u64> = {
        let mut s: Vec<u64> = data
            .series
            .values()
            .flat_map(|p| p.iter().map(|x| x.0))
            .collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    if steps.is_empty() {
        return crate::chart::placeholder(
            "Tokens drawn per domain",
            "no data/<domain>/tokens points yet",
        );
    }
    let order: Vec<&str> = data.domains.iter().map(|d| d.domain.as_str()).collect();
    // Cumulative heights per step: each domain's value at a step (its last point at or before).
    let value_at = |d: &str, step: u64| {
        data.series.get(d).and_then(|p| {
            let i = p.partition_point(|x| x.0 <= step);
            (i > 0).then(|| p[i - 1].1)
        })
    };
    let mut stacks: Vec<Vec<f64>> = Vec::new();
    for &s in &steps {
        let mut acc = 0.0;
        let mut col = Vec::with_capacity(order.len() + 1);
        col.push(0.0);
        for d in &order {
            acc += value_at(d, s).unwrap_or(0.0);
            col.push(acc);
        }
        stacks.push(col);
    }
    let (x0, x1) = (steps[0] as f64, *steps.last().unwrap_or(&0) as f64);
    let ymax = stacks
        .iter()
        .filter_map(|c| c.last())
        .fold(1.0f64, |a, &b| a.max(b));
    let x = |s: f64| pad + (w - 2.0 * pad) * if x1 > x0 { (s - x0) / (x1 - x0) } else { 1.0 };
    let y = |v: f64| h - pad - (h - 2.0 * pad) * v / ymax;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" role=\"img\" class=\"stacked\"><title>Tokens drawn per domain</title>"
    );
    for (k, d) in order.iter().enumerate() {
        let mut pts = String::new();
        for (i, s) in steps.iter().enumerate() {
            pts.push_str(&format!("{:.1},{:.1} ", x(*s as f64), y(stacks[i][k + 1])));
        }
        for (i, s) in steps.iter().enumerate().rev() {
            pts.push_str(&format!("{:.1},{:.1} ", x(*s as f64), y(stacks[i][k])));
        }
        out.push_str(&format!(
            "<polygon class=\"area\" data-domain=\"{}\" points=\"{}\" fill=\"{}\" fill-opacity=\"0.8\"/>",
            escape_xml(d),
            pts.trim_end(),
            COLOURS[k % COLOURS.len()]
        ));
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\"><tspan fill=\"{}\">■</tspan> {}</text>",
            pad + 120.0 * k as f64,
            16.0,
            COLOURS[k % COLOURS.len()],
            escape_xml(d)
        ));
    }
    out.push_str(&format!(
        "<line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#888\"/><text x=\"{pad}\" y=\"{t}\" font-size=\"11\">step {x0}</text><text x=\"{r}\" y=\"{t}\" font-size=\"11\" text-anchor=\"end\">step {x1}</text><text x=\"4\" y=\"{top}\" font-size=\"11\">{ymax}</text>",
        b = h - pad,
        r = w - pad,
        t = h - pad + 16.0,
        top = pad,
    ));
    out.push_str("</svg>");
    out
}
