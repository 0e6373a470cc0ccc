//! The search query language against a real index, on SQLite and on PostgreSQL: the cases in
//! `tests/data/search.txt` (queries and the rows they find; malformed queries and the column
//! and expectation of their error), the list page and API answering them (a 400 for a bad
//! one), and a property test that no query string panics the parser and none reaches SQL as
//! text (every accepted query compiles to fixed SQL vocabulary and `$N` placeholders, and runs).
//!
//! The fixture lab: six experiments `acme/s#1`..`#6` with JSON specs (expert counts 8, 8, 4,
//! 16, 4, 2; tags), runs `run-1`..`run-5` (`#4` has two), `#5` only proposed, `#6` rejected.

use glassbox_schemas::RefRole;
use std::collections::BTreeMap;

use glassbox_ledger::index::Index;
use glassbox_ledger::{BlobStore, DirSource, LabDir, LockMode, LogReader};
use glassbox_schemas::record::{
    ApprovalBody, IssueRef, ProposalBody, RejectionBody, ResultBody, RunEnding, RunStartedBody,
    refs,
};
use glassbox_schemas::{ExperimentId, LedgerEntry, RunId, RunStatus};
use glassbox_web::search::{self, sql};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

fn spec_json(n: u64, experts: u32, tags: &[&str], lr: f64) -> String {
    let tags = tags
        .iter()
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let toml = format!(
        r#"[experiment]
name = "search fixture {n}"
slug = "search-fixture-{n}"
hypothesis = "Experts at count {experts} reach the Markov floor with routing kept balanced."
tags = [{tags}]
[model]
d_model = 32
n_layers = 2
n_heads = 4
seq_len = 32
[model.moe]
n_experts = {experts}
top_k = 2
d_expert = 32
[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = 100
batch_size = 4
lr = {lr}
"#
    );
    let spec = glassbox_schemas::parse_toml(&toml).unwrap();
    serde_json::to_string(&spec).unwrap()
}

/// Builds the fixture lab and an index of it at `url` (SQLite file or PostgreSQL).
async fn fixture(dir: &std::path::Path, url: &str) -> Index {
    fixture_lab(dir, url).await.1
}

async fn fixture_lab(dir: &std::path::Path, url: &str) -> (LabDir, Index) {
    let (lab, _) = LabDir::init(&dir.join("lab"), "test.example/search").unwrap();
    let w = lab.writer(LockMode::Wait).unwrap();
    let put = |bytes: &[u8]| lab.blobs().put(&mut &bytes[..]).unwrap().hash.0;
    let e = |x: &str, r, b: glassbox_schemas::record::EntryBody| {
        LedgerEntry::new(Some(ExperimentId::from(x)), r, b)
    };
    // (n, experts, tags, lr, author, title)
    type Experiment<'a> = (u64, u32, &'a [&'a str], f64, &'a str, &'a str);
    let experiments: [Experiment; 6] = [
        (1, 8, &["moe", "ci"], 0.003, "alice", "Eight experts"),
        (2, 8, &["moe"], 0.001, "bob", "Eight experts, slower"),
        (3, 4, &["ci"], 0.03, "alice", "Four experts, hot lr"),
        (4, 16, &[], 0.003, "carol", "Sixteen experts"),
        (5, 4, &["bias"], 0.003, "dave", "Router bias heuristic"),
        (6, 2, &["ci"], 0.003, "bob", "Two experts 100% sure"),
    ];
    let mut hashes = BTreeMap::new();
    for (n, experts, tags, lr, author, title) in experiments {
        let json = spec_json(n, experts, tags, lr);
        let spec = glassbox_schemas::validate::parse_json(&json).unwrap();
        let hash = glassbox_schemas::spec_hash(&spec).unwrap();
        hashes.insert(n, hash);
        let id = format!("acme/s#{n}");
        w.append_entry(&e(
            &id,
            refs([(RefRole::Spec, put(json.as_bytes()))]),
            ProposalBody {
                sweep: None,
                spec_hash: hash,
                author: author.into(),
                title: title.into(),
                issue: Some(IssueRef {
                    repo: "acme/s".into(),
                    number: n,
                    url: format!("https://github.com/acme/s/issues/{n}"),
                }),
            }
            .into(),
        ))
        .unwrap();
        if n == 6 {
            w.append_entry(&e(
                &id,
                BTreeMap::new(),
                RejectionBody {
                    spec_hash: hash,
                    by: "maint".into(),
                    reason: "no".into(),
                }
                .into(),
            ))
            .unwrap();
        } else if n != 5 {
            w.append_entry(&e(
                &id,
                BTreeMap::new(),
                ApprovalBody {
                    sweep: None,
                    spec_hash: hash,
                    approver: "maint".into(),
                }
                .into(),
            ))
            .unwrap();
        }
    }
    // (run, experiment, status, steps, final metrics)
    type Run<'a> = (&'a str, u64, RunStatus, u64, &'a [(&'a str, f64)]);
    let runs: [Run; 5] = [
        (
            "run-1",
            1,
            RunStatus::Succeeded,
            100,
            &[("eval/markov/loss", 1.25), ("train/loss", 1.2)],
        ),
        (
            "run-2",
            2,
            RunStatus::Succeeded,
            100,
            &[("eval/markov/loss", 1.35), ("train/loss", 1.3)],
        ),
        ("run-3", 3, RunStatus::Diverged, 12, &[("train/loss", 3.0)]),
        ("run-4", 4, RunStatus::Failed, 0, &[]),
        (
            "run-5",
            4,
            RunStatus::Succeeded,
            100,
            &[("eval/markov/loss", 1.1), ("train/loss", 1.0)],
        ),
    ];
    for (run, n, status, steps, metrics) in runs {
        let id = format!("acme/s#{n}");
        w.append_entry(&e(
            &id,
            BTreeMap::new(),
            RunStartedBody {
                worker: None,
                host: None,
                run: RunId::from(run),
                spec_hash: hashes[&n],
                code_revision: "abc".into(),
                backend: "cpu".into(),
                backend_reason: None,
                hardware: "test".into(),
                seed: 0,
                kernel_hashes: BTreeMap::new(),
                resumed_from_step: None,
                build: None,
                data: None,
                attempt: None,
            }
            .into(),
        ))
        .unwrap();
        w.append_entry(&e(
            &id,
            BTreeMap::new(),
            ResultBody {
                run: RunId::from(run),
                spec_hash: hashes[&n],
                ending: RunEnding {
                    status,
                    steps,
                    final_metrics: metrics.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                    reason: None,
                },
                forecast: None,
                params_blake3: None,
            }
            .into(),
        ))
        .unwrap();
    }
    drop(w);
    let index = Index::connect(url).await.unwrap();
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&source, &lab.verifier_key().unwrap()).unwrap();
    index
        .sync_with_blobs(&reader, Some(&lab.blobs()))
        .await
        .unwrap();
    (lab, index)
}

/// A PostgreSQL database of its own for one test (a schema on the test server).
async fn postgres_url(name: &str) -> String {
    glassbox_test_support::postgres_schema("search", name)
        .await
        .url
}

/// The rows a query finds, as run ids (the experiment id for a row without a run), sorted.
async fn rows(index: &Index, q: &str) -> Result<Vec<String>, search::QueryError> {
    let expr = search::parse(q)?;
    let mut out: Vec<String> = search::search(index, &expr)
        .await
        .unwrap_or_else(|e| panic!("{q}: {e}"))
        .into_iter()
        .map(|h| h.run.unwrap_or(h.experiment))
        .collect();
    out.sort();
    Ok(out)
}

/// Runs every case of `tests/data/search.txt`; returns how many ran.
async fn check_cases(index: &Index, engine: &str) -> usize {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/search.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let mut failures = Vec::new();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        n += 1;
        let Some((query, want)) = line.rsplit_once(" =>") else {
            panic!("{path}:{}: no ` =>` in {line:?}", i + 1);
        };
        let want = want.trim();
        if let Some(query) = query.strip_prefix("! ") {
            // `! query => column expected-text`
            let (column, expected) = want.split_once(' ').unwrap_or((want, ""));
            match search::parse(query) {
                Ok(e) => failures.push(format!("line {}: {query:?} parsed: {e:?}", i + 1)),
                Err(e) => {
                    if e.column.to_string() != column || !e.expected.contains(expected) {
                        failures.push(format!(
                            "line {}: {query:?}: got column {} `{}`, want {column} `{expected}`",
                            i + 1,
                            e.column,
                            e.expected
                        ));
                    }
                }
            }
            continue;
        }
        let want: Vec<String> = want.split_whitespace().map(str::to_string).collect();
        // The list page's filter finds the experiments of the same rows (through its own,
        // packed and sometimes join-less, query).
        let listed = search::for_filter(index, Some(query))
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"))
            .unwrap_or_default();
        let of_rows: std::collections::BTreeSet<String> =
            search::search(index, &search::parse(query).unwrap())
                .await
                .unwrap()
                .into_iter()
                .map(|h| h.experiment)
                .collect();
        if listed != of_rows {
            failures.push(format!(
                "line {}: {query:?} on {engine}: the list finds {listed:?}, the rows' experiments are {of_rows:?}",
                i + 1
            ));
        }
        match rows(index, query).await {
            Ok(got) if got == want => {}
            other => failures.push(format!(
                "line {}: {query:?} on {engine}: got {other:?}, want {want:?}",
                i + 1
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_cases_hold_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("index.db").display().to_string();
    let index = fixture(dir.path(), &url).await;
    assert!(check_cases(&index, "sqlite").await >= 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_cases_hold_on_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let url = postgres_url("cases").await;
    let index = fixture(dir.path(), &url).await;
    assert!(check_cases(&index, "postgres").await >= 50);
}

/// The list page and the API answer a search, keep a view's columns, and refuse a bad query
/// or column with a 400 that names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_page_and_api_search_and_refuse_bad_queries() {
    use axum::http::StatusCode;
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("index.db").display().to_string();
    let (lab, index) = fixture_lab(dir.path(), &url).await;
    let st = glassbox_web::WebState::new(lab, index, glassbox_web::LiveHub::new(16));
    let get = |uri: &'static str| crate::routes::get(&st, uri);
    let (status, _, page) =
        get("/experiments?q=tag%20%3D%20bias%20or%20model.moe.n_experts%20%3E%3D%2016").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains("acme/s#5") && page.contains("acme/s#4"),
        "{page}"
    );
    assert!(!page.contains("acme/s#1<"), "{page}");
    assert!(page.contains("page 1 of 1 · 2 experiments"), "{page}");
    let (status, _, page) = get(
        "/experiments?q=status%20%3D%20succeeded&cols=id,metric:eval/markov/loss&sort=id&dir=asc",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("class=\"metric\"") && page.contains(">eval/markov/loss</th>"),
        "{page}"
    );
    assert!(
        page.contains("1.2500") || page.contains("1.25"),
        "the final metric is shown: {page}"
    );
    assert!(
        page.contains("value=\"/experiments?q=status+%3D+succeeded&amp;cols=id%2Cmetric%3Aeval%2Fmarkov%2Floss&amp;sort=id&amp;dir=asc\""),
        "the view is a link: {page}"
    );
    let (status, _, body) = get("/api/v1/runs?q=status%20%3D%20diverged").await;
    assert_eq!(status, StatusCode::OK);
    let runs: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["run-3"]);
    let (status, _, body) = get("/api/v1/experiments?q=status%20%3D%20winning").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("column 10: expected a status"), "{body}");
    // A bad column is a page in the site's layout, the form kept and the error beside the
    // field it is about; a bad search likewise.
    let (status, headers, body) = get("/experiments?cols=id,bogus").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(body.contains("`bogus` is not a column"), "{body}");
    assert!(
        body.contains("<nav") && body.contains("name=\"cols\""),
        "{body}"
    );
    assert!(body.contains("data-field=\"cols\""), "{body}");
    let (status, _, body) = get("/experiments?q=status%20%3D%20winning").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("data-field=\"q\""), "{body}");
    // A spec field as a column.
    let (status, _, page) = get("/experiments?cols=id,spec:model.moe.n_experts,final_loss").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("<code>model.moe.n_experts</code>"), "{page}");
    assert!(page.contains("Final train/loss"), "{page}");
    assert!(page.contains("<td><code>16</code></td>"), "{page}");
    let (status, _, _) = get("/experiments?cols=spec:Bad%20Path").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// Words the compiled SQL may hold: keywords, the index's tables and columns, placeholders.
const SQL_VOCABULARY: &[&str] = &[
    "AND",
    "OR",
    "NOT",
    "IS",
    "NULL",
    "IN",
    "SELECT",
    "FROM",
    "WHERE",
    "LIKE",
    "ESCAPE",
    "LOWER",
    "COALESCE",
    "e.id",
    "r.id",
    "e.title",
    "e.author",
    "r.status",
    "e.status",
    "r.steps",
    "e.created",
    "e.updated",
    "r.started",
    "r.ended",
    "r.spec_hash",
    "e.spec_hash",
    "spec_hash",
    "spec_fields",
    "path",
    "num",
    "text",
    "final_metrics",
    "run",
    "name",
    "value",
];

/// Whether `sql` is built of [`SQL_VOCABULARY`], `$N` placeholders for `params` parameters,
/// operators, and the two fixed string literals `''` and `'\'`.
fn only_fixed_sql(sql: &str, params: usize) -> Result<(), String> {
    let unquoted = sql.replace("'\\'", " ").replace("''", " ");
    if unquoted.contains('\'') || unquoted.contains('"') || unquoted.contains(';') {
        return Err(format!(
            "a quote or `;` of the query reached the SQL: {sql}"
        ));
    }
    for word in
        unquoted.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$')))
    {
        if word.is_empty() || SQL_VOCABULARY.contains(&word) {
            continue;
        }
        match word.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
            Some(n) if (1..=params).contains(&n) => {}
            _ => return Err(format!("`{word}` is not fixed SQL: {sql}")),
        }
    }
    Ok(())
}

/// Query-ish text: tokens of the language (and hostile ones) in any order, or any string.
fn query_text() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "status",
        "=",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "~",
        "(",
        ")",
        ",",
        ".",
        "and",
        "or",
        "not",
        "in",
        "\"x'y\"",
        "\"50%_\\\\\"",
        "model.moe.n_experts",
        "metrics.\"eval/markov/loss\"",
        "8",
        "1.3",
        "-2e3",
        "2026-01-01",
        "tag",
        "succeeded",
        "'; DROP TABLE runs; --",
        "created",
        "steps",
        "title",
        "spec.train.lr",
        "$1",
        "é",
        "\"",
        "run-1",
    ]);
    prop_oneof![
        prop::collection::vec(token, 0..12).prop_map(|t| t.join(" ")),
        any::<String>(),
        "[ -~]{0,80}",
        comparisons(),
    ]
}

/// Well-formed-looking comparisons joined by `and`/`or`, sometimes negated or grouped: most
/// parse, some are refused by type (a text after `<`).
fn comparisons() -> impl Strategy<Value = String> {
    let field = prop::sample::select(vec![
        "status",
        "tag",
        "author",
        "title",
        "id",
        "run",
        "steps",
        "created",
        "ended",
        "model.moe.n_experts",
        "train.lr",
        "metrics.\"eval/markov/loss\"",
        "experiment.tags",
    ]);
    let op = prop::sample::select(vec!["=", "!=", "<", ">=", "~"]);
    let value = prop::sample::select(vec![
        "8",
        "1.3",
        "succeeded",
        "diverged",
        "\"x'y; --\"",
        "2026-01-01",
        "ci",
        "\"100%\"",
    ]);
    let one = (field, op, value, any::<bool>())
        .prop_map(|(f, o, v, not)| format!("{}{f} {o} {v}", if not { "not " } else { "" }));
    prop::collection::vec((one, any::<bool>()), 1..5).prop_map(|parts| {
        let mut q = String::new();
        for (i, (c, or)) in parts.iter().enumerate() {
            if i > 0 {
                q.push_str(if *or { " or " } else { " and " });
            }
            q.push_str(c);
        }
        if parts.len() > 2 { format!("({q})") } else { q }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// No query string panics the parser, and an accepted one compiles to fixed SQL only.
    #[test]
    fn no_query_panics_or_reaches_sql_unbound(q in query_text()) {
        if let Ok(expr) = search::parse(&q) {
            let compiled = sql::compile(&expr);
            prop_assert!(only_fixed_sql(&compiled.where_sql, compiled.params.len()).is_ok(),
                "{q:?}: {:?}", only_fixed_sql(&compiled.where_sql, compiled.params.len()));
        }
    }
}

/// Accepted queries of the property test's kind also run: the SQL they compile to is valid on
/// SQLite (a sample, fixed by a seed, so the test is the same every run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_queries_run() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("index.db").display().to_string();
    let index = fixture(dir.path(), &url).await;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = comparisons();
    let mut ran = 0;
    for _ in 0..400 {
        let q = strategy.new_tree(&mut runner).unwrap().current();
        if let Ok(expr) = search::parse(&q) {
            search::search(&index, &expr)
                .await
                .unwrap_or_else(|e| panic!("{q:?} was accepted but its SQL failed: {e}"));
            ran += 1;
        }
    }
    assert!(ran >= 50, "only {ran} of the sampled queries parsed");
}
