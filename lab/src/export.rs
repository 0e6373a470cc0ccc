//! `glassbox export --format hf`: a run's snapshot as a directory the Hugging Face tools load
//! (`AutoModelForCausalLM.from_pretrained`, `AutoTokenizer`), on the record.
//!
//! The directory holds `config.json` and `model.safetensors` (weights only, f32, in the twin
//! class's names; see [`glassbox_runner::hf`]), `tokenizer.json` with `tokenizer_config.json`
//! (a byte-level tokenizer whose token `b` is byte `b` for the `bytes` tokenizer, the stored
//! one otherwise), `generation_config.json`, and `README.md`, a model card written from the
//! ledger. Every file is stored as a blob with an `artifact` entry (`hf/<run>/step-<N>/<file>`),
//! so `glassbox verify` covers the export; the card cites those entries and the run's own, so
//! it is written last and records itself after them.
//!
//! Not here: the model's mathematics or the twin's choice (the runner).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use glassbox_runner::data::tokenizer::TextTokenizer;
use glassbox_runner::hf::{self, HfModel, SpecialIds};
use glassbox_runner::text::TextCodec;
use glassbox_schemas::record::ArtifactBody;
use glassbox_schemas::{Blake3Hash, RefRole};
use serde::Serialize;

use crate::error::LabError;
use crate::recorder::{Recorder, one_ref};
use crate::trained::TrainedModel;

/// One file written and recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportedFile {
    /// File name in the directory.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Its BLAKE3.
    pub blake3: Blake3Hash,
    /// Its `artifact` entry.
    pub entry: u64,
}

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Export {
    /// The directory.
    pub dir: PathBuf,
    /// The `transformers` class.
    pub architecture: String,
    /// Every file, the model card last.
    pub files: Vec<ExportedFile>,
}

/// Who may use the weights, and the command that checks the record, for the model card.
#[derive(Debug, Clone, Default)]
pub struct CardFacts {
    /// The licence the lab declares for what it publishes (`[export] licence`).
    pub licence: Option<String>,
    /// How a reader audits this lab's log (`glassbox verify ...`).
    pub verify_command: String,
}

/// Writes `model` as a Hugging Face directory at `out` (which must not exist or be empty) and
/// records every file.
pub fn export_hf(
    rec: &Recorder,
    model: &TrainedModel,
    out: &Path,
    facts: &CardFacts,
) -> Result<Export, LabError> {
    let refuse = |m: String| LabError::Refused(m);
    if out.exists() {
        let empty = std::fs::read_dir(out)
            .map_err(LabError::io("cannot read", out))?
            .next()
            .is_none();
        if !empty {
            return Err(refuse(format!(
                "{} is not empty: export into a new directory",
                out.display()
            )));
        }
    }
    std::fs::create_dir_all(out).map_err(LabError::io("cannot create", out))?;
    let (tokenizer_json, ids, eos_text) = match &model.codec {
        TextCodec::Bytes => (TextTokenizer::bytes_json()?, SpecialIds::default(), None),
        TextCodec::Stored(t) => {
            let (eod, id) = t.end_of_document();
            (
                t.to_json()?,
                SpecialIds {
                    bos: None,
                    eos: Some(id),
                },
                Some(eod.to_string()),
            )
        }
    };
    let converted: HfModel = hf::convert(
        &model.model.dims,
        &model.state.params,
        &model.state.router_bias,
        ids,
    )?;
    let prefix = format!("hf/{}/step-{}", model.run, model.snapshot.step);
    let mut files = Vec::new();
    let write = |files: &mut Vec<ExportedFile>, name: &str, bytes: &[u8]| {
        record_file(rec, model, out, &prefix, name, bytes).map(|f| files.push(f))
    };
    write(&mut files, "config.json", &pretty(&converted.config)?)?;
    write(
        &mut files,
        "model.safetensors",
        &safetensors_bytes(&converted)?,
    )?;
    write(&mut files, "tokenizer.json", &tokenizer_json)?;
    let tokenizer_config = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model.model.dims.seq_len,
        "eos_token": eos_text,
        "clean_up_tokenization_spaces": false,
    });
    write(
        &mut files,
        "tokenizer_config.json",
        &pretty(&tokenizer_config)?,
    )?;
    let generation = serde_json::json!({
        "eos_token_id": ids.eos,
        "bos_token_id": ids.bos,
        "do_sample": false,
    });
    write(&mut files, "generation_config.json", &pretty(&generation)?)?;
    let card = model_card(rec, model, &converted, facts, &files)?;
    write(&mut files, "README.md", card.as_bytes())?;
    Ok(Export {
        dir: out.to_path_buf(),
        architecture: converted.twin.architecture().to_string(),
        files,
    })
}

/// Writes `name` into `out`, stores it as a blob and records its `artifact` entry.
fn record_file(
    rec: &Recorder,
    model: &TrainedModel,
    out: &Path,
    prefix: &str,
    name: &str,
    bytes: &[u8],
) -> Result<ExportedFile, LabError> {
    let path = out.join(name);
    std::fs::write(&path, bytes).map_err(LabError::io("cannot write", &path))?;
    let (hash, _) = rec.put_file(&path)?;
    let entry = rec.record(
        model.record.experiment.as_ref(),
        one_ref(RefRole::Artifact, &hash),
        ArtifactBody {
            name: format!("{prefix}/{name}"),
            bytes: bytes.len() as u64,
            run: Some(model.run.clone()),
        },
    )?;
    Ok(ExportedFile {
        name: name.to_string(),
        bytes: bytes.len() as u64,
        blake3: hash.0,
        entry,
    })
}

fn pretty(v: &serde_json::Value) -> Result<Vec<u8>, LabError> {
    let mut b = serde_json::to_vec_pretty(v).map_err(|e| LabError::Task(e.to_string()))?;
    b.push(b'\n');
    Ok(b)
}

/// The tensors as one safetensors file (f32, little-endian), with the format the twin's
/// loader expects in its metadata.
fn safetensors_bytes(m: &HfModel) -> Result<Vec<u8>, LabError> {
    let raw: Vec<(String, Vec<usize>, Vec<u8>)> = m
        .tensors
        .iter()
        .map(|(n, s, v)| {
            (
                n.clone(),
                s.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views = raw
        .iter()
        .map(|(n, s, b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                .map(|v| (n.as_str(), v))
                .map_err(|e| LabError::Task(format!("tensor {n}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::tensor::serialize(views, Some(meta))
        .map_err(|e| LabError::Task(format!("safetensors: {e}")))
}

/// The model card: what the weights are, where they came from, and how to check it.
fn model_card(
    rec: &Recorder,
    m: &TrainedModel,
    converted: &HfModel,
    facts: &CardFacts,
    files: &[ExportedFile],
) -> Result<String, LabError> {
    let spec = &m.spec;
    let started = &m.record.started;
    let d = &m.model.dims;
    let mut entries: Vec<(u64, String)> = Vec::new();
    let mut final_metrics = None;
    rec.for_each_entry(|i, e| {
        if e.body.run() != Some(&m.run) {
            return;
        }
        let kind = e.body.kind().as_str().to_string();
        if let glassbox_schemas::record::EntryBody::Result(r) = &e.body {
            final_metrics = Some(r.ending.final_metrics.clone());
        }
        if kind != "artifact" {
            entries.push((i, kind));
        }
    })?;
    let licence = facts.licence.as_deref().unwrap_or(
        "none declared: the lab's configuration names no licence (`[export] licence`); ask the lab before reusing these weights",
    );
    let mut s = String::new();
    let slug = &spec.experiment.slug;
    let _ = writeln!(
        s,
        "---\nlicense: other\nlibrary_name: transformers\ntags:\n- glassbox\n- mixture-of-experts\n---\n"
    );
    let _ = writeln!(
        s,
        "# {} ({slug}), {} at step {}\n",
        spec.experiment.name, m.run, m.snapshot.step
    );
    let _ = writeln!(s, "{}\n", spec.experiment.hypothesis.trim());
    let _ = writeln!(s, "## Licence\n\n{licence}\n");
    let _ = writeln!(
        s,
        "## Model\n\n`{}` ({} parameters): {} layers, width {}, {} heads, {} routed experts of width {} with top-{} {} routing, {} shared, context {} tokens, vocabulary {}. Loads with `AutoModelForCausalLM.from_pretrained` as `{}`, whose mathematics is exactly glassbox's (routing is dropless at inference). Weights are f32.\n",
        converted.twin.architecture(),
        m.model.num_params(),
        d.n_layers,
        d.d_model,
        d.n_heads,
        d.n_experts,
        d.d_expert,
        d.top_k,
        match d.score {
            glassbox_runner::backend::ScoreKind::Sigmoid => "sigmoid",
            glassbox_runner::backend::ScoreKind::Softmax => "softmax",
        },
        d.n_shared,
        d.seq_len,
        d.vocab,
        converted.twin.architecture(),
    );
    let _ = writeln!(s, "## Training\n");
    let _ = writeln!(s, "- spec: `{}`", started.spec_hash);
    let _ = writeln!(
        s,
        "- tokenizer: `{}`",
        started
            .data
            .as_ref()
            .map_or(spec.data.tokenizer.to_string(), |d| d.tokenizer.to_string())
    );
    for c in &spec.data.mixture {
        let source = match (&c.corpus, &c.generator) {
            (Some(h), _) => format!("corpus `{h}`"),
            (None, Some(g)) => format!("generator `{:?}` seed {}", g.kind, g.seed),
            (None, None) => "no source".into(),
        };
        let shard = started
            .data
            .as_ref()
            .and_then(|d| d.shards.get(&c.domain))
            .map_or(String::new(), |h| format!(", token shard `{h}`"));
        let _ = writeln!(
            s,
            "- domain `{}`: weight {}, {source}{shard}",
            c.domain, c.weight
        );
    }
    let _ = writeln!(
        s,
        "- run `{}`: snapshot at step {} of {}, {} tokens, {:.4e} FLOPs, {:.1} s",
        m.run,
        m.snapshot.step,
        spec.train.steps,
        m.state.total_tokens,
        m.state.flops_used,
        m.state.elapsed_seconds
    );
    let _ = writeln!(
        s,
        "- hardware: {} on backend `{}`",
        started.hardware, started.backend
    );
    match &started.build {
        Some(b) => {
            let _ = writeln!(
                s,
                "- binary: BLAKE3 `{}`, commit `{}`{}",
                b.executable_blake3,
                b.commit.as_deref().unwrap_or("unknown"),
                if b.dirty {
                    " (with uncommitted changes)"
                } else {
                    ""
                }
            );
        }
        None => {
            let _ = writeln!(s, "- binary: code revision `{}`", started.code_revision);
        }
    }
    if let Some(fm) = &final_metrics {
        let _ = writeln!(
            s,
            "\n### Final metrics of the run\n\n| metric | value |\n|---|---|"
        );
        for (k, v) in fm {
            let _ = writeln!(s, "| `{k}` | {v} |");
        }
    }
    let _ = writeln!(s, "\n## On the record\n\n| entry | kind |\n|---|---|");
    for (i, kind) in &entries {
        let _ = writeln!(s, "| {i} | `{kind}` |");
    }
    let _ = writeln!(s, "\n| file | BLAKE3 | entry |\n|---|---|---|");
    for f in files {
        let _ = writeln!(s, "| `{}` | `{}` | {} |", f.name, f.blake3, f.entry);
    }
    let _ = writeln!(
        s,
        "| `README.md` | this file | the entry after {} |",
        files.last().map_or(0, |f| f.entry)
    );
    let _ = writeln!(
        s,
        "\nEvery entry above is in the lab's signed, append-only log; the snapshot these weights come from is blob `{}` (entry {}). Check the log, every blob and these files' hashes with:\n\n```sh\n{}\n```",
        m.snapshot.blob, m.snapshot.entry, facts.verify_command
    );
    Ok(s)
}
