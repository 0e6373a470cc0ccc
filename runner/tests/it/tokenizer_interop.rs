//! Interop with the Python `tokenizers` package (the pinned wheel `cargo xtask test` installs
//! in its virtualenv, whose `python` is on `PATH`): the same `tokenizer.json` encodes a fixed
//! multilingual sample (ASCII, accents, CJK, emoji, whitespace runs, a literal special token)
//! to the same ids in glassbox and in Python, for a byte-level BPE and a Unigram tokenizer
//! trained here. The two sides share the Rust implementation but not its build (the wheel uses
//! onig for regexes, glassbox fancy-regex), so this checks the file, not just the code.

use std::process::Command;

use glassbox_runner::data::tokenizer::{TextTokenizer, TrainKind};

/// The version `xtask` pins (`PYTHON_PINS`), the same release as the crate.
const PYTHON_TOKENIZERS: &str = "0.23.2";

const SAMPLE: [&str; 8] = [
    "The quick brown fox jumps over the lazy dog.",
    "Déjà vu: naïve café, façade, Ångström, Straße.",
    "日本語のテキストと中文文本，还有한국어.",
    "emoji 🙂👍🏽 and flags 🇫🇷 in a line",
    "  leading, inner    runs\tof\t\ttabs\n\n\nand newlines   ",
    "code: fn main() { println!(\"{}\", 1 + 2); } // done",
    "a literal <|endoftext|> in the middle",
    "",
];

fn corpus() -> Vec<String> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tinyshakespeare.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.split("\n\n")
        .take(2000)
        .map(str::to_string)
        .chain(SAMPLE.iter().map(|s| s.to_string()))
        .collect()
}

/// Ids from Python for every sample, encoded without the post-processor's templates.
fn python_ids(tokenizer_json: &[u8]) -> Vec<Vec<u32>> {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("tokenizer.json");
    let samples = dir.path().join("samples.json");
    std::fs::write(&tok, tokenizer_json).unwrap();
    std::fs::write(&samples, serde_json::to_vec(&SAMPLE).unwrap()).unwrap();
    let script = r#"
import json, sys, tokenizers
from tokenizers import Tokenizer
t = Tokenizer.from_file(sys.argv[1])
samples = json.load(open(sys.argv[2], encoding="utf-8"))
print(json.dumps({"version": tokenizers.__version__,
                  "ids": [t.encode(s, add_special_tokens=False).ids for s in samples]}))
"#;
    let out = Command::new("python")
        .arg("-c")
        .arg(script)
        .arg(&tok)
        .arg(&samples)
        .output()
        .expect(
            "`python` with the `tokenizers` package: run the tests with `cargo xtask test` (its virtualenv is on PATH)",
        );
    assert!(
        out.status.success(),
        "python failed (run the tests with `cargo xtask test`, which installs tokenizers=={PYTHON_TOKENIZERS}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], PYTHON_TOKENIZERS);
    serde_json::from_value(v["ids"].clone()).unwrap()
}

#[test]
fn python_tokenizers_encodes_the_sample_to_the_same_ids() {
    for kind in [TrainKind::Bpe, TrainKind::Unigram] {
        let t = TextTokenizer::train(kind, 600, corpus().into_iter()).unwrap();
        let json = t.to_json().unwrap();
        let ours: Vec<Vec<u32>> = t
            .encode_documents(&SAMPLE)
            .unwrap()
            .into_iter()
            .map(|mut e| {
                e.ids.pop(); // the end-of-document token glassbox appends
                e.ids
            })
            .collect();
        let theirs = python_ids(&json);
        for ((s, a), b) in SAMPLE.iter().zip(&ours).zip(&theirs) {
            assert_eq!(a, b, "{kind:?}: {s:?}");
        }
        // The sample is not trivially short: the multilingual lines take several tokens each.
        assert!(ours[2].len() > 5 && ours[3].len() > 5, "{kind:?}: {ours:?}");
        // The literal special token in the text is that token.
        assert!(ours[6].contains(&t.end_of_document().1), "{kind:?}");
    }
}
