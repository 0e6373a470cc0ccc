//! `glassbox data generate` / `data import` end to end: a corpus becomes a blob and a `dataset`
//! entry, a spec names it by hash, and `glassbox run` trains on exactly those bytes through the
//! lab; a corpus whose bytes were changed on disk stops the run with a clear `failed` result.

use std::path::Path;

use crate::support::MICRO_MODEL;

fn glassbox(dir: &Path, args: &[&str]) -> std::process::Output {
    crate::support::glassbox(dir, None, args).output().unwrap()
}

fn spec_naming(dir: &Path, corpus: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[experiment]
name = "stored corpus"
slug = "stored-corpus"
hypothesis = "A run trains on the exact corpus its spec names by hash."
{MICRO_MODEL}[[data.mixture]]
domain = "gen"
corpus = "{corpus}"
[train]
steps = 5
batch_size = 2
lr = 0.003
eval_interval = 5
eval_batches = 1
seed = 1
"#
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn generated_corpus_is_recorded_and_trained_on_and_tampering_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = glassbox(
        d,
        &[
            "data", "generate", "--domain", "gen", "--seed", "9", "--bytes", "20000", "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ds: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hash = ds["hash"].as_str().unwrap().to_string();
    assert_eq!(ds["bytes"], 20000);
    assert!(ds["body"]["entropy_bits_per_byte"].as_f64().unwrap() > 0.0);

    let spec = spec_naming(d, &hash);
    let out = glassbox(
        d,
        &["run", spec.to_str().unwrap(), "--json", "--threads", "1"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["status"], "succeeded");
    assert!(s["outcome"]["final_metrics"]["eval/gen/loss"].is_number());
    // The final checkpoint was moved into the blob store: the summary names its blob, not the
    // worker's scratch path, and the blob is the checkpoint file (safetensors: an 8-byte
    // header length, then a JSON header).
    assert!(s["outcome"]["checkpoint"].is_null(), "{s}");
    assert_eq!(s["ledger"]["checkpoint"]["step"], 5, "{s}");
    let blob = s["ledger"]["checkpoint"]["blob"].as_str().unwrap();
    let ckpt = d.join("final.safetensors");
    let out = glassbox(d, &["ledger", "get", blob, "-o", ckpt.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&ckpt).unwrap();
    assert_eq!(bytes.get(8), Some(&b'{'), "not a safetensors file");

    // Change the corpus bytes on disk: the next run refuses them and says which corpus.
    let hex = hash.trim_start_matches("blake3:");
    let path = d.join("lab/blobs").join(&hex[..2]).join(&hex[2..]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let out = glassbox(
        d,
        &["run", spec.to_str().unwrap(), "--json", "--threads", "1"],
    );
    assert_eq!(out.status.code(), Some(13), "a failed run exits 13");
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["status"], "failed");
    let reason = s["reason"].as_str().unwrap();
    assert!(
        reason.contains(&hash) && reason.contains("corrupt"),
        "{reason}"
    );
}

#[test]
fn importing_a_file_records_a_dataset_and_bad_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("corpus.txt"), "to be or not to be ".repeat(100)).unwrap();
    let out = glassbox(d, &["data", "import", "--domain", "text", "corpus.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("blake3:") && text.contains("dataset entry 0"),
        "{text}"
    );
    // The snippet it suggests is TOML as printed (indentation aside) and names the corpus.
    let snippet: String = text
        .lines()
        .skip_while(|l| !l.contains("use it in a spec"))
        .skip(1)
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    let parsed: toml::Table = toml::from_str(&snippet).unwrap_or_else(|e| panic!("{e}: {snippet}"));
    let entry = &parsed["data"]["mixture"][0];
    assert_eq!(entry["domain"].as_str(), Some("text"), "{snippet}");
    assert!(
        text.starts_with(entry["corpus"].as_str().unwrap()),
        "{snippet}"
    );
    let log = glassbox(d, &["ledger", "log", "--json"]);
    assert!(String::from_utf8_lossy(&log.stdout).contains("\"dataset\""));

    let out = glassbox(
        d,
        &["data", "import", "--domain", "Bad Domain", "corpus.txt"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--domain \"Bad Domain\""));
    std::fs::write(d.join("empty.txt"), "").unwrap();
    let out = glassbox(d, &["data", "import", "--domain", "text", "empty.txt"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty"));
}
