//! Real data end to end: a JSONL file and a Parquet file (written here by the `parquet`
//! crate's writer) become corpora, a byte-level BPE tokenizer is trained on both, the corpora
//! are tokenized into shards, a small MoE trains on the mixture through the lab, `glassbox
//! verify` passes and `glassbox reproduce` matches bitwise. And bad input (a JSONL line that
//! is not JSON, a missing text field, a Parquet file without the column, a spec whose vocab
//! disagrees with its tokenizer) is refused naming where, leaving nothing in the store.

use std::path::Path;
use std::sync::Arc;

use glassbox_schemas::EntryKind;

use crate::support::{body, entries};

fn glassbox(dir: &Path, args: &[&str]) -> std::process::Output {
    crate::support::glassbox(dir, None, args).output().unwrap()
}

fn ok_json(out: std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Paragraphs of the repository's Shakespeare sample: real text for the tokenizer to learn from.
fn paragraphs() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tinyshakespeare.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.split("\n\n")
        .filter(|p| !p.trim().is_empty())
        .take(400)
        .map(str::to_string)
        .collect()
}

fn write_jsonl(path: &Path, docs: &[String]) {
    let mut out = String::new();
    for (i, d) in docs.iter().enumerate() {
        out.push_str(&serde_json::json!({ "id": i, "text": d }).to_string());
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

/// A Parquet file with columns `id` (INT64) and `column` (UTF-8 strings), written by the
/// `parquet` crate's own writer, in two row groups.
fn write_parquet(path: &Path, column: &str, docs: &[String]) {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    let schema = Arc::new(
        parse_message_type(&format!(
            "message doc {{ REQUIRED INT64 id; REQUIRED BYTE_ARRAY {column} (UTF8); }}"
        ))
        .unwrap(),
    );
    let file = std::fs::File::create(path).unwrap();
    let mut w =
        SerializedFileWriter::new(file, schema, Arc::new(WriterProperties::builder().build()))
            .unwrap();
    for (g, group) in docs.chunks(docs.len().div_ceil(2)).enumerate() {
        let mut rg = w.next_row_group().unwrap();
        let mut col = rg.next_column().unwrap().unwrap();
        let ids: Vec<i64> = (0..group.len() as i64)
            .map(|i| g as i64 * 1000 + i)
            .collect();
        col.typed::<Int64Type>()
            .write_batch(&ids, None, None)
            .unwrap();
        col.close().unwrap();
        let mut col = rg.next_column().unwrap().unwrap();
        let values: Vec<ByteArray> = group.iter().map(|d| ByteArray::from(d.as_str())).collect();
        col.typed::<ByteArrayType>()
            .write_batch(&values, None, None)
            .unwrap();
        col.close().unwrap();
        rg.close().unwrap();
    }
    w.close().unwrap();
}

fn spec(dir: &Path, vocab: u64, tokenizer: &str, plays: &str, more: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[experiment]
name = "real data"
slug = "real-data"
hypothesis = "A small MoE trains on two tokenized corpora and reproduces bitwise."
[model]
vocab = {vocab}
d_model = 16
n_layers = 1
n_heads = 2
seq_len = 16
[model.moe]
n_experts = 4
top_k = 2
d_expert = 16
[data]
tokenizer = "{tokenizer}"
[[data.mixture]]
domain = "plays"
corpus = "{plays}"
weight = 2
[[data.mixture]]
domain = "more"
corpus = "{more}"
weight = 1
[train]
steps = 4
batch_size = 2
lr = 0.003
eval_interval = 4
eval_batches = 1
seed = 5
"#
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn jsonl_and_parquet_train_through_a_bpe_tokenizer_verify_and_reproduce() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let docs = paragraphs();
    write_jsonl(&d.join("plays.jsonl"), &docs[..200]);
    write_parquet(&d.join("more.parquet"), "text", &docs[200..]);

    let plays = ok_json(glassbox(
        d,
        &[
            "data",
            "import",
            "--domain",
            "plays",
            "plays.jsonl",
            "--json",
        ],
    ));
    assert_eq!(plays["body"]["documents"], 200);
    assert_eq!(plays["body"]["format"]["kind"], "jsonl");
    let text_bytes: usize = docs[..200].iter().map(String::len).sum();
    assert_eq!(plays["body"]["text_bytes"], text_bytes);
    let more = ok_json(glassbox(
        d,
        &[
            "data",
            "import",
            "--domain",
            "more",
            "more.parquet",
            "--json",
        ],
    ));
    assert_eq!(more["body"]["documents"], docs.len() - 200);
    assert_eq!(more["body"]["format"]["kind"], "parquet");
    let (plays, more) = (
        plays["hash"].as_str().unwrap().to_string(),
        more["hash"].as_str().unwrap().to_string(),
    );

    let train = [
        "data",
        "tokenizer",
        "train",
        "--vocab",
        "400",
        "--from",
        &plays,
        &more,
        "--json",
    ];
    let tok = ok_json(glassbox(d, &train));
    assert_eq!(tok["body"]["kind"], "bpe");
    assert_eq!(tok["body"]["end_of_document"], "<|endoftext|>");
    let vocab = tok["body"]["vocab_size"].as_u64().unwrap();
    assert_eq!(vocab, 400, "enough text for the full vocabulary");
    // Trained again the same way, it is the same bytes (and the same entry).
    let again = ok_json(glassbox(d, &train));
    assert_eq!(again["hash"], tok["hash"]);
    assert_eq!(again["entry"], tok["entry"]);
    let tokenizer = tok["hash"].as_str().unwrap().to_string();

    let shard = ok_json(glassbox(
        d,
        &[
            "data",
            "tokenize",
            "--corpus",
            &plays,
            "--tokenizer",
            &tokenizer,
            "--json",
        ],
    ));
    assert_eq!(shard["reused"], false);
    assert_eq!(shard["body"]["documents"], 200);
    assert_eq!(shard["body"]["text_bytes"], text_bytes);
    let tokens = shard["body"]["tokens"].as_u64().unwrap();
    // Fewer tokens than bytes (plus one end-of-document token per document): BPE merged.
    assert!(
        tokens < text_bytes as u64 * 3 / 4,
        "{tokens} tokens for {text_bytes} bytes"
    );

    let s = spec(d, vocab, &tokenizer, &plays, &more);
    let run = ok_json(glassbox(
        d,
        &["run", s.to_str().unwrap(), "--json", "--threads", "2"],
    ));
    assert_eq!(run["status"], "succeeded", "{run}");
    let fm = &run["outcome"]["final_metrics"];
    assert!(fm["eval/plays/bpb"].as_f64().unwrap() > 0.0, "{fm}");
    assert!(fm["eval/more/bpb"].as_f64().unwrap() > 0.0, "{fm}");
    assert_eq!(
        fm["data/plays/tokens"].as_f64().unwrap() + fm["data/more/tokens"].as_f64().unwrap(),
        fm["throughput/total_tokens"].as_f64().unwrap()
    );

    // The run names its exact shards; the one tokenized above was reused, the other was
    // tokenized by the worker: one `tokenized` entry per corpus.
    let all = entries(&d.join("lab"));
    let started = all
        .iter()
        .find(|e| e.kind() == EntryKind::RunStarted)
        .unwrap();
    let data = &body(started)["data"];
    assert_eq!(data["tokenizer"], tokenizer);
    assert_eq!(data["shards"]["plays"], shard["body"]["shard"]);
    let tokenized: Vec<_> = all
        .iter()
        .filter(|e| e.kind() == EntryKind::Tokenized)
        .map(body)
        .collect();
    assert_eq!(tokenized.len(), 2, "{tokenized:?}");
    assert_eq!(data["shards"]["more"], tokenized[1]["shard"]);

    let out = glassbox(d, &["verify"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let r = ok_json(glassbox(
        d,
        &["reproduce", "run-000001", "--threads", "1", "--json"],
    ));
    assert_eq!(r["outcome"], "reproduced", "{r}");

    // What the model writes decodes through its own tokenizer, and the same seed gives the
    // same tokens and text again. Scoring counts the scored tokens' source bytes.
    let sample = |seed: &str| {
        ok_json(glassbox(
            d,
            &[
                "sample",
                "run-000001",
                "--prompt",
                "ROMEO:",
                "--max-tokens",
                "10",
                "--seed",
                seed,
                "--json",
            ],
        ))["completion"]
            .clone()
    };
    let c = sample("4");
    let again = sample("4");
    assert_eq!((&c["ids"], &c["text"]), (&again["ids"], &again["text"]));
    let ids = c["ids"].as_array().unwrap();
    assert!(!ids.is_empty() && ids.len() <= 10, "{c}");
    // A character the last tokens leave unfinished is held back and counted, not shown as
    // U+FFFD (an untrained model may still write byte sequences that are never UTF-8 mid-text).
    assert!(!c["text"].as_str().unwrap().ends_with('\u{FFFD}'), "{c}");
    assert!(c["incomplete_bytes"].as_u64().unwrap() < 4, "{c}");
    let held = d.join("held.txt");
    std::fs::write(
        &held,
        "ROMEO: But soft, what light through yonder window breaks?",
    )
    .unwrap();
    let score = ok_json(glassbox(
        d,
        &[
            "score",
            "run-000001",
            "--text",
            held.to_str().unwrap(),
            "--json",
        ],
    ))["score"]
        .clone();
    let (tokens, bytes) = (
        score["tokens"].as_u64().unwrap(),
        score["bytes"].as_u64().unwrap(),
    );
    assert!(tokens < 57 && bytes < 57 && bytes > 40, "{score}");
    // The export carries the stored tokenizer and its end-of-text token.
    let out_dir = d.join("hf");
    ok_json(glassbox(
        d,
        &["export", "run-000001", out_dir.to_str().unwrap(), "--json"],
    ));
    let tc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(tc["eos_token"], "<|endoftext|>");
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["vocab_size"].as_u64(), Some(vocab));
    assert!(cfg["eos_token_id"].is_u64(), "{cfg}");

    // A shard whose bytes changed is refused, named, before anything trains.
    let shard_hash = data["shards"]["more"].as_str().unwrap().to_string();
    let hex = shard_hash.trim_start_matches("blake3:");
    let path = d.join("lab/blobs").join(&hex[..2]).join(&hex[2..]);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let out = glassbox(d, &["reproduce", "run-000001", "--threads", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("token shard {shard_hash}"))
            && err.contains("damaged or substituted"),
        "{err}"
    );

    // A spec whose vocab disagrees with the tokenizer is refused, saying what to set.
    let s = spec(d, vocab + 1, &tokenizer, &plays, &more);
    let out = glassbox(d, &["run", s.to_str().unwrap(), "--threads", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "model.vocab = {}: the tokenizer {tokenizer} has {vocab} tokens (added tokens included); set model.vocab = {vocab}",
            vocab + 1
        )),
        "{err}"
    );
}

/// Blob files in the lab's store (temporary files included).
fn stored(d: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(d.join("lab/blobs")) else {
        return out;
    };
    for e in rd.flatten() {
        if e.path().is_dir() {
            out.extend(
                std::fs::read_dir(e.path())
                    .unwrap()
                    .flatten()
                    .map(|f| f.path()),
            );
        } else {
            out.push(e.path());
        }
    }
    out.sort();
    out
}

#[test]
fn bad_corpora_are_refused_naming_where_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(glassbox(d, &["init"]).status.success());
    let before = stored(d);
    let cases: [(&str, &str, Vec<&str>); 3] = [
        (
            "notjson.jsonl",
            "{\"text\":\"one\"}\n{\"text\":\"two\"}\n{text: three}\n",
            vec![],
        ),
        (
            "nofield.jsonl",
            "{\"text\":\"one\"}\n{\"body\":\"two\",\"id\":2}\n",
            vec![],
        ),
        (
            "ok.jsonl",
            "{\"content\":\"one\"}\n",
            vec!["--text-field", "text"],
        ),
    ];
    let want = [
        "error: notjson.jsonl: line 3: not a JSON object (key must be a string at line 1 column 2); each line must be one JSON object with a string field \"text\"",
        "error: nofield.jsonl: line 2: no field \"text\" (its fields: body, id); pass --text-field with the field that holds the document's text",
        "error: ok.jsonl: line 1: no field \"text\" (its fields: content); pass --text-field",
    ];
    for ((name, content, extra), want) in cases.iter().zip(want) {
        std::fs::write(d.join(name), content).unwrap();
        let mut args = vec!["data", "import", "--domain", "web", name];
        args.extend(extra);
        let out = glassbox(d, &args);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with(want), "{name}: {err}");
    }
    let docs: Vec<String> = vec!["a document".into(), "another one".into()];
    write_parquet(&d.join("body.parquet"), "body", &docs);
    let out = glassbox(d, &["data", "import", "--domain", "web", "body.parquet"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        "error: body.parquet: column \"text\": no such column (its columns: id, body); pass --text-column with the string column that holds the documents' text"
    );
    // Nothing half-written: the store holds what it held before.
    assert_eq!(stored(d), before);
    // With the right column it is a corpus of two documents.
    let ok = ok_json(glassbox(
        d,
        &[
            "data",
            "import",
            "--domain",
            "web",
            "body.parquet",
            "--text-column",
            "body",
            "--json",
        ],
    ));
    assert_eq!(ok["body"]["documents"], 2);
}
