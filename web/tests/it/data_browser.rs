//! The data browser: a lab with a JSONL corpus, a tokenizer, its token shard and a run that
//! drew from the corpus. The JSON routes (in the OpenAPI document) give the corpus with its
//! tokens and runs, a document with its token spans, and the run's planned and drawn tokens per
//! domain; the pages escape every string of the corpus; and headless Chromium opens the corpus
//! page (token boundaries drawn) and the run's consumption chart, with screenshots in
//! `target/screenshots/`.

use glassbox_schemas::RefRole;
use std::collections::BTreeMap;
use std::process::Stdio;

use axum::body::Body;
use fantoccini::{ClientBuilder, Locator};
use glassbox_corpus::{EncodedDocument, TokenShard};
use glassbox_ledger::index::Index;
use glassbox_ledger::{BlobStore, DirSource, LabDir, LockMode, LogReader};
use glassbox_schemas::data::{CorpusFormat, RunData, TokenizedBody, TokenizerBody, TokenizerKind};
use glassbox_schemas::record::{DatasetBody, ProposalBody, RunStartedBody, refs};
use glassbox_schemas::{BlobHash, ExperimentId, LedgerEntry, RunId};
use glassbox_web::{LiveHub, WebState};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// Three documents, one of them hostile markup.
const DOCS: [&str; 3] = [
    "hello world",
    "<script>alert('doc')</script> is text",
    "the end",
];

struct DataLab {
    _dir: tempfile::TempDir,
    lab: LabDir,
    index: Index,
    corpus: BlobHash,
    tokenizer: BlobHash,
}

fn put(lab: &LabDir, bytes: &[u8]) -> BlobHash {
    lab.blobs().put(&mut &bytes[..]).unwrap().hash
}

/// Words and spaces as tokens: each word or space run is one token, byte counts exact.
fn encode(doc: &str) -> EncodedDocument {
    let mut ids = Vec::new();
    let mut bytes = Vec::new();
    let mut word = String::new();
    for ch in doc.chars() {
        if ch == ' ' {
            if !word.is_empty() {
                ids.push(1 + (word.len() as u32 % 30));
                bytes.push(word.len() as u32);
                word.clear();
            }
            ids.push(31);
            bytes.push(1);
        } else {
            word.push(ch);
        }
    }
    if !word.is_empty() {
        ids.push(1 + (word.len() as u32 % 30));
        bytes.push(word.len() as u32);
    }
    ids.push(0);
    bytes.push(0);
    EncodedDocument { ids, bytes }
}

async fn data_lab() -> DataLab {
    let dir = tempfile::tempdir().unwrap();
    let (lab, _) = LabDir::init(dir.path(), "test.example/data").unwrap();
    let vkey = lab.verifier_key().unwrap();
    let jsonl: String = DOCS
        .iter()
        .map(|d| format!("{}\n", serde_json::json!({ "text": d })))
        .collect();
    let corpus = put(&lab, jsonl.as_bytes());
    let tokenizer = put(&lab, b"{\"model\":\"stand-in tokenizer.json\"}");
    let mut shard = TokenShard::new(corpus, tokenizer, 32);
    for d in DOCS {
        shard.push(&encode(d));
    }
    let shard_hash = put(&lab, &shard.to_bytes());
    let spec_text = format!(
        r#"
[experiment]
name = "data browser"
slug = "data-browser"
hypothesis = "The data pages show what a run drew from its corpora."
[model]
vocab = 32
d_model = 16
n_layers = 1
n_heads = 2
seq_len = 4
[model.moe]
n_experts = 2
top_k = 1
d_expert = 16
[data]
tokenizer = "{tokenizer}"
[[data.mixture]]
domain = "web"
corpus = "{corpus}"
weight = 3
[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
weight = 1
[train]
steps = 20
batch_size = 2
lr = 0.001
"#
    );
    let spec = glassbox_schemas::parse_toml(&spec_text).unwrap();
    let spec_hash = glassbox_schemas::spec_hash(&spec).unwrap();
    let spec_blob = put(
        &lab,
        &glassbox_schemas::canonical::canonical_json(&spec).unwrap(),
    );
    let w = lab.writer(LockMode::Wait).unwrap();
    let entry = |exp: Option<&str>, r, body: glassbox_schemas::record::EntryBody| {
        LedgerEntry::new(exp.map(ExperimentId::from), r, body)
    };
    let text_bytes: usize = DOCS.iter().map(|d| d.len()).sum();
    for e in [
        entry(
            None,
            refs([(RefRole::Corpus, corpus.0)]),
            DatasetBody {
                domain: "web".into(),
                bytes: jsonl.len() as u64,
                tokenizer: "stored".into(),
                source: "file web.jsonl".into(),
                entropy_bits_per_byte: None,
                format: Some(CorpusFormat::Jsonl {
                    text_field: "text".into(),
                }),
                documents: Some(3),
                text_bytes: Some(text_bytes as u64),
            }
            .into(),
        ),
        entry(
            None,
            refs([(RefRole::Tokenizer, tokenizer.0)]),
            TokenizerBody {
                kind: TokenizerKind::Bpe,
                model: "BPE".into(),
                vocab_size: 32,
                trained_on: vec![corpus],
                special_tokens: vec!["<|endoftext|>".into()],
                end_of_document: "<|endoftext|>".into(),
                end_of_document_id: 0,
                source: "trained".into(),
            }
            .into(),
        ),
        entry(
            None,
            refs([(RefRole::Shard, shard_hash.0)]),
            TokenizedBody {
                corpus,
                tokenizer,
                shard: shard_hash,
                tokens: shard.len() as u64,
                documents: 3,
                text_bytes: text_bytes as u64,
            }
            .into(),
        ),
        entry(
            Some("data-browser"),
            refs([(RefRole::Spec, spec_blob.0)]),
            ProposalBody {
                sweep: None,
                spec_hash,
                author: "alice".into(),
                title: "data browser".into(),
                issue: None,
            }
            .into(),
        ),
        entry(
            Some("data-browser"),
            BTreeMap::new(),
            RunStartedBody {
                worker: None,
                host: None,
                run: RunId::from("run-000001"),
                spec_hash,
                code_revision: "abc".into(),
                backend: "cpu".into(),
                backend_reason: None,
                hardware: "test".into(),
                seed: 0,
                kernel_hashes: BTreeMap::new(),
                resumed_from_step: None,
                build: None,
                data: Some(RunData {
                    tokenizer,
                    shards: [("web".to_string(), shard_hash)].into_iter().collect(),
                }),
                attempt: None,
            }
            .into(),
        ),
    ] {
        w.append_entry(&e).unwrap();
    }
    drop(w);
    let index = Index::connect(&lab.index_path().display().to_string())
        .await
        .unwrap();
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    index
        .sync(&LogReader::open(&source, &vkey).unwrap())
        .await
        .unwrap();
    // Tokens drawn per domain over 20 steps of 2 rows x 4 tokens: "web" gives 6 a step,
    // "markov" 2.
    let mut tx = index.write_pool().begin().await.unwrap();
    for s in 1..=20i64 {
        for (name, per_step) in [("data/web/tokens", 6), ("data/markov/tokens", 2)] {
            sqlx::query(
                "INSERT INTO metric_points (run, name, step, value, entry) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind("run-000001")
            .bind(name)
            .bind(s)
            .bind((s * per_step) as f64)
            .bind(4i64)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
    }
    tx.commit().await.unwrap();
    // Written past the indexer: the overviews the pages draw first are drawn again.
    index.rebuild_overviews().await.unwrap();
    DataLab {
        _dir: dir,
        lab,
        index,
        corpus,
        tokenizer,
    }
}

fn state(d: &DataLab) -> WebState {
    WebState::new(d.lab.clone(), d.index.clone(), LiveHub::new(64))
}

async fn get(d: &DataLab, uri: &str) -> (u16, String) {
    let res = glassbox_web::app(state(d))
        .oneshot(
            axum::http::Request::builder()
                .uri(uri)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).to_string())
}

#[tokio::test]
async fn data_routes_give_corpora_documents_with_tokens_and_run_consumption() {
    let d = data_lab().await;
    let (status, body) = get(&d, &format!("/api/v1/datasets/{}", d.corpus)).await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["dataset"]["documents"], 3);
    assert_eq!(v["dataset"]["format"]["kind"], "jsonl");
    assert_eq!(v["tokenized"][0]["tokenizer"], d.tokenizer.to_string());
    assert_eq!(v["runs"], serde_json::json!(["run-000001"]));

    // Document 1 with its tokens: "<script>alert('doc')</script>" is 29 bytes, one token.
    let (status, body) = get(
        &d,
        &format!(
            "/api/v1/datasets/{}/documents/1?tokenizer={}",
            d.corpus, d.tokenizer
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["text"], DOCS[1]);
    let spans = v["tokens"].as_array().unwrap();
    assert_eq!(spans.len(), encode(DOCS[1]).ids.len());
    assert_eq!(
        (&spans[0]["start"], &spans[0]["end"]),
        (&0.into(), &29.into())
    );
    assert_eq!(spans.last().unwrap()["end"], DOCS[1].len());
    let (status, _) = get(&d, &format!("/api/v1/datasets/{}/documents/3", d.corpus)).await;
    assert_eq!(status, 404);

    let (status, body) = get(&d, "/api/v1/runs/run-000001/data").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["domains"][0]["domain"], "web");
    assert_eq!(v["domains"][0]["planned_fraction"], 0.75);
    assert_eq!(v["domains"][0]["tokens"], 120.0);
    assert_eq!(v["domains"][0]["drawn_fraction"], 0.75);
    assert_eq!(v["domains"][1]["tokens"], 40.0);
    assert_eq!(v["series"]["web"].as_array().unwrap().len(), 20);

    let (_, doc) = get(&d, "/api/v1/openapi.json").await;
    for path in [
        "/api/v1/datasets/{hash}",
        "/api/v1/datasets/{hash}/documents/{doc}",
        "/api/v1/tokenizers",
        "/api/v1/runs/{run}/data",
    ] {
        assert!(
            doc.contains(&format!("\"{path}\"")),
            "{path} is in the OpenAPI document"
        );
    }

    // The page escapes the document's markup.
    let (status, page) = get(
        &d,
        &format!("/data/corpora/{}?doc=1&tokenizer={}", d.corpus, d.tokenizer),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        page.contains("&lt;script&gt;alert('doc')&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script>alert('doc')"));
    // Documents are numbered one way, from 1, in the heading and the pager alike.
    assert!(page.contains("Document 2 of 3"), "{page}");
    assert!(page.contains("document 2 of 3"), "{page}");
    assert!(!page.contains("from 0"), "{page}");
    // The run's data page prints token counts as integers.
    let (_, page) = get(&d, "/data/runs/run-000001").await;
    assert!(page.contains(">120<"), "{page}");
    assert!(!page.contains("120.0000"), "{page}");
    // The list of corpora gives every corpus its tokens.
    let (_, page) = get(&d, "/data").await;
    let row = page
        .split("<tr>")
        .find(|r| r.contains(&d.corpus.to_string()))
        .unwrap();
    let tokens_cell = row.split("<td").nth(7).unwrap_or_default();
    assert!(tokens_cell.chars().any(|c| c.is_ascii_digit()), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_opens_a_corpus_with_token_boundaries_and_a_runs_consumption_chart() {
    let driver_bin = crate::browser::chromedriver();
    let d = data_lab().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(glassbox_web::serve_on(
        listener,
        state(&d),
        Default::default(),
        async {
            let _ = stop_rx.await;
        },
    ));
    let base = format!("http://{addr}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut driver = tokio::process::Command::new(&driver_bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver_bin.display()));
    crate::browser::eventually("chromedriver to listen", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
    })
    .await;
    let mut opts = serde_json::json!({
        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1000", "--hide-scrollbars"]
    });
    if std::path::Path::new("/usr/bin/chromium").is_file() {
        opts["binary"] = "/usr/bin/chromium".into();
    }
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), opts);
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a WebDriver session with headless Chromium");

    // The Data page links the corpus; its page draws document 0's tokens.
    c.goto(&format!("{base}/data")).await.unwrap();
    c.find(Locator::Css(&format!(
        "#datasets a[href='/data/corpora/{}']",
        d.corpus
    )))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    let tokens = c
        .find_all(Locator::Css("#document span.tok"))
        .await
        .unwrap();
    assert_eq!(
        tokens.len(),
        encode(DOCS[0]).ids.len() - 1,
        "the end-of-document token has no text"
    );
    assert_eq!(tokens[0].text().await.unwrap(), "hello");
    // Next document: the markup is shown as text, one token.
    c.find(Locator::Css("#next-document"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let first = crate::browser::eventually("document 1", || async {
        let t = c.find(Locator::Css("#document span.tok")).await.ok()?;
        let text = t.text().await.ok()?;
        (text != "hello").then_some(text)
    })
    .await;
    assert_eq!(first, "<script>alert('doc')</script>");
    crate::browser::shot(&c, "data-corpus").await;

    // The run's data page: planned against drawn, and the stacked chart with both domains.
    c.goto(&format!("{base}/data/runs/run-000001"))
        .await
        .unwrap();
    let areas = c
        .find_all(Locator::Css("#consumption svg polygon.area"))
        .await
        .unwrap();
    assert_eq!(areas.len(), 2);
    let (_, _, w, h) = c
        .find(Locator::Css("#consumption svg"))
        .await
        .unwrap()
        .rectangle()
        .await
        .unwrap();
    assert!(w > 300.0 && h > 100.0, "the chart is laid out: {w}x{h}");
    let row = c
        .find(Locator::Css("#run-mixture tbody tr:first-child"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(row.contains("75.0%") && row.contains("120"), "{row}");
    crate::browser::shot(&c, "data-run").await;

    c.close().await.unwrap();
    let _ = driver.kill().await;
    let _ = stop_tx.send(());
    let _ = server.await;
}
