//! `glassbox data eval-suite import` of Parquet files, the format the field publishes its suites
//! in: a multiple-choice file whose choices are a list column and a perplexity file with a text
//! column are stored as the very suite versions the same items make as JSON Lines, and a bad
//! row is named by row and field with nothing stored.
//!
//! Not here: scoring a suite (`lab/tests/it/evals.rs`) or eval jobs (`worker_e2e.rs`).

use std::path::Path;
use std::sync::Arc;

use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::support::glassbox;

/// One multiple-choice item: context, choices, answer.
type Choice = (&'static str, &'static [&'static str], i64);

const ITEMS: [Choice; 3] = [
    ("The cat sat on the", &[" mat", " moon", " idea"], 0),
    ("One, two,", &[" five", " three"], 1),
    (
        "Water boils at 100 degrees",
        &[" Kelvin", " Fahrenheit", " Celsius"],
        2,
    ),
];

const TEXTS: [&str; 2] = [
    "It was the best of times, it was the worst of times.",
    "Call me Ishmael. Some years ago, never mind how long precisely.",
];

/// A Parquet file of multiple-choice items as the `datasets` library writes one: `context`
/// (UTF-8), `choices` (a three-level LIST of UTF-8) and `answer` (INT64), written by the
/// `parquet` crate's own writer.
fn write_choice_parquet(path: &Path, items: &[Choice]) {
    let schema = Arc::new(
        parse_message_type(
            "message suite {
               REQUIRED BYTE_ARRAY context (UTF8);
               REQUIRED group choices (LIST) {
                 REPEATED group list { REQUIRED BYTE_ARRAY element (UTF8); }
               }
               REQUIRED INT64 answer;
             }",
        )
        .unwrap(),
    );
    let file = std::fs::File::create(path).unwrap();
    let props = Arc::new(WriterProperties::builder().build());
    let mut w = SerializedFileWriter::new(file, schema, props).unwrap();
    let mut rg = w.next_row_group().unwrap();

    let mut col = rg.next_column().unwrap().unwrap();
    let contexts: Vec<ByteArray> = items.iter().map(|i| ByteArray::from(i.0)).collect();
    col.typed::<ByteArrayType>()
        .write_batch(&contexts, None, None)
        .unwrap();
    col.close().unwrap();

    // The list's elements: definition level 1 (present), repetition level 0 at each row's first
    // element and 1 after it.
    let mut col = rg.next_column().unwrap().unwrap();
    let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
    for (_, choices, _) in items {
        for (k, c) in choices.iter().enumerate() {
            values.push(ByteArray::from(*c));
            def.push(1i16);
            rep.push(i16::from(k > 0));
        }
    }
    col.typed::<ByteArrayType>()
        .write_batch(&values, Some(&def), Some(&rep))
        .unwrap();
    col.close().unwrap();

    let mut col = rg.next_column().unwrap().unwrap();
    let answers: Vec<i64> = items.iter().map(|i| i.2).collect();
    col.typed::<Int64Type>()
        .write_batch(&answers, None, None)
        .unwrap();
    col.close().unwrap();
    rg.close().unwrap();
    w.close().unwrap();
}

fn write_text_parquet(path: &Path, texts: &[&str]) {
    let schema =
        Arc::new(parse_message_type("message suite { REQUIRED BYTE_ARRAY text (UTF8); }").unwrap());
    let file = std::fs::File::create(path).unwrap();
    let props = Arc::new(WriterProperties::builder().build());
    let mut w = SerializedFileWriter::new(file, schema, props).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let mut col = rg.next_column().unwrap().unwrap();
    let values: Vec<ByteArray> = texts.iter().map(|t| ByteArray::from(*t)).collect();
    col.typed::<ByteArrayType>()
        .write_batch(&values, None, None)
        .unwrap();
    col.close().unwrap();
    rg.close().unwrap();
    w.close().unwrap();
}

/// `glassbox data eval-suite import FILE --name NAME --kind KIND --json`: the stored suite.
fn import(d: &Path, file: &str, name: &str, kind: &str) -> serde_json::Value {
    let out = glassbox(
        d,
        None,
        &[
            "data",
            "eval-suite",
            "import",
            file,
            "--name",
            name,
            "--kind",
            kind,
            "--json",
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn parquet_suites_are_the_same_versions_as_their_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(glassbox(d, None, &["init"]).status().unwrap().success());

    write_choice_parquet(&d.join("choice.parquet"), &ITEMS);
    let lines: String = ITEMS
        .iter()
        .map(|(context, choices, answer)| {
            serde_json::json!({"context": context, "choices": choices, "answer": answer})
                .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(d.join("choice.jsonl"), lines).unwrap();
    let from_parquet = import(d, "choice.parquet", "toy-choice", "multiple-choice");
    let from_jsonl = import(d, "choice.jsonl", "toy-choice-jsonl", "multiple-choice");
    assert_eq!(from_parquet["suite"]["items"], 3, "{from_parquet}");
    assert_eq!(from_parquet["suite"]["kind"], "multiple_choice");
    assert_eq!(
        from_parquet["suite"]["suite"], from_jsonl["suite"]["suite"],
        "the same items are the same version whatever file they came in"
    );

    write_text_parquet(&d.join("text.parquet"), &TEXTS);
    let lines: String = TEXTS
        .iter()
        .map(|t| serde_json::json!({ "text": t }).to_string() + "\n")
        .collect();
    std::fs::write(d.join("text.jsonl"), lines).unwrap();
    let from_parquet = import(d, "text.parquet", "toy-text", "perplexity");
    let from_jsonl = import(d, "text.jsonl", "toy-text-jsonl", "perplexity");
    assert_eq!(from_parquet["suite"]["items"], 2, "{from_parquet}");
    assert_eq!(from_parquet["suite"]["suite"], from_jsonl["suite"]["suite"]);
}

#[test]
fn a_bad_parquet_row_is_named_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(glassbox(d, None, &["init"]).status().unwrap().success());
    let mut items = ITEMS;
    items[1].2 = 7; // two choices
    write_choice_parquet(&d.join("bad.parquet"), &items);
    let out = glassbox(
        d,
        None,
        &[
            "data",
            "eval-suite",
            "import",
            "bad.parquet",
            "--name",
            "bad",
            "--kind",
            "multiple-choice",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.parquet: row 2, column \"answer\"") && err.contains("answer 7"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let list = glassbox(d, None, &["data", "eval-suite", "list", "--json"])
        .output()
        .unwrap();
    assert!(list.status.success());
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed, serde_json::json!([]), "nothing stored");
}
