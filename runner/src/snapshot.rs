//! Training snapshots: the complete training state in one file, for exact resume. (A
//! "checkpoint" in this workspace is the ledger's signed tree head; the snapshot's file
//! format and its ledger entry kind keep the older name, `glassbox-checkpoint` and
//! `checkpoint`, so that files and entries already written still read.)
//!
//! Format (version 1) is safetensors, so standard tools can open it:
//! `u64 little-endian header length N | N bytes of JSON header | raw little-endian tensors`.
//! The header maps each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}`
//! (offsets into the data section, tensors contiguous in header order) and holds
//! `"__metadata__"`, a string-to-string map:
//!
//! | key | meaning |
//! |---|---|
//! | `format` | `glassbox-checkpoint` |
//! | `version` | `1` |
//! | `spec_hash` | the spec the state belongs to; resume refuses another |
//! | `step` | optimiser steps completed; also the data position (batches are a pure function of (seed, step), so no sampler state exists beyond it) |
//! | `total_tokens`, `flops_used`, `elapsed_seconds` | budget counters |
//!
//! Tensors: `param/<name>`, `adam_m/<name>`, `adam_v/<name>` (the model's dtype) for every
//! parameter, and `router_bias/layer_<i>` (F64), the balancing state. There is no other RNG
//! state: init and sampling streams are derived from (seed, purpose, position) (see
//! [`crate::rng`]). Files are written to a temp file, fsynced and renamed, so a crash leaves
//! either the old or the new snapshot, never half of one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use crate::error::RunnerError;
use crate::scalar::Real;

/// Format name in the metadata.
pub const FORMAT: &str = "glassbox-checkpoint";
/// Format version this code writes and reads.
pub const VERSION: u32 = 1;

/// The state a snapshot holds, on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingSnapshot<F> {
    /// Spec hash text (`blake3:...`).
    pub spec_hash: String,
    /// Steps completed.
    pub step: u64,
    /// Tokens trained on.
    pub total_tokens: u64,
    /// FLOPs counted against the budget.
    pub flops_used: f64,
    /// Wall seconds spent so far (all segments of the run).
    pub elapsed_seconds: f64,
    /// `(name, shape, values)` per parameter.
    pub params: Vec<(String, Vec<usize>, Vec<F>)>,
    /// AdamW first moments, parameter order.
    pub adam_m: Vec<Vec<F>>,
    /// AdamW second moments, parameter order.
    pub adam_v: Vec<Vec<F>>,
    /// Router bias per layer.
    pub router_bias: Vec<Vec<f64>>,
}

fn err(path: &Path, reason: impl Into<String>) -> RunnerError {
    RunnerError::Snapshot {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Write `state` to `path` atomically.
pub fn save<F: Real>(path: &Path, state: &TrainingSnapshot<F>) -> Result<(), RunnerError> {
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        json!({
            "format": FORMAT,
            "version": VERSION.to_string(),
            "spec_hash": state.spec_hash,
            "step": state.step.to_string(),
            "total_tokens": state.total_tokens.to_string(),
            "flops_used": format!("{:e}", state.flops_used),
            "elapsed_seconds": format!("{}", state.elapsed_seconds),
        }),
    );
    let mut data: Vec<u8> = Vec::new();
    let mut add = |name: String, dtype: &str, shape: &[usize], bytes: Vec<u8>| {
        let begin = data.len();
        data.extend_from_slice(&bytes);
        header.insert(
            name,
            json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    };
    let enc = |v: &[F]| {
        let mut b = Vec::with_capacity(std::mem::size_of_val(v));
        for &x in v {
            x.write_le(&mut b);
        }
        b
    };
    for (i, (name, shape, values)) in state.params.iter().enumerate() {
        add(format!("param/{name}"), F::DTYPE, shape, enc(values));
        add(
            format!("adam_m/{name}"),
            F::DTYPE,
            shape,
            enc(&state.adam_m[i]),
        );
        add(
            format!("adam_v/{name}"),
            F::DTYPE,
            shape,
            enc(&state.adam_v[i]),
        );
    }
    for (l, b) in state.router_bias.iter().enumerate() {
        let mut bytes = Vec::with_capacity(b.len() * 8);
        for &x in b {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        add(format!("router_bias/layer_{l}"), "F64", &[b.len()], bytes);
    }
    let mut head =
        serde_json::to_vec(&Value::Object(header)).map_err(|e| err(path, e.to_string()))?;
    // safetensors pads the header with spaces to an 8-byte boundary.
    while head.len() % 8 != 0 {
        head.push(b' ');
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| RunnerError::io(format!("create {}", dir.display()), e))?;
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&(head.len() as u64).to_le_bytes())?;
        f.write_all(&head)?;
        f.write_all(&data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| RunnerError::io(format!("write checkpoint {}", path.display()), e))
}

/// Read a snapshot written by [`save`] with the same element type.
pub fn load<F: Real>(path: &Path) -> Result<TrainingSnapshot<F>, RunnerError> {
    let bytes = std::fs::read(path)
        .map_err(|e| RunnerError::io(format!("read checkpoint {}", path.display()), e))?;
    from_bytes(&bytes, path)
}

/// Read a snapshot's bytes (a file's, or a blob's); `path` names it in errors.
pub fn from_bytes<F: Real>(bytes: &[u8], path: &Path) -> Result<TrainingSnapshot<F>, RunnerError> {
    if bytes.len() < 8 {
        return Err(err(path, "file is shorter than its 8-byte header length"));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8])) as usize;
    if n > bytes.len() - 8 {
        return Err(err(path, format!("header length {n} exceeds the file")));
    }
    let header: BTreeMap<String, Value> = serde_json::from_slice(&bytes[8..8 + n])
        .map_err(|e| err(path, format!("header is not JSON: {e}")))?;
    let data = &bytes[8 + n..];
    let meta = header
        .get("__metadata__")
        .and_then(Value::as_object)
        .ok_or_else(|| err(path, "no __metadata__"))?;
    let m = |k: &str| -> Result<String, RunnerError> {
        meta.get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| err(path, format!("metadata has no `{k}`")))
    };
    if m("format")? != FORMAT {
        return Err(err(path, format!("not a {FORMAT}")));
    }
    if m("version")? != VERSION.to_string() {
        return Err(err(
            path,
            format!("version {} (this build reads {VERSION})", m("version")?),
        ));
    }
    let num = |k: &str| -> Result<f64, RunnerError> {
        m(k)?
            .parse::<f64>()
            .map_err(|_| err(path, format!("metadata `{k}` is not a number")))
    };
    let tensor = |name: &str, dtype: &str| -> Result<(Vec<usize>, &[u8]), RunnerError> {
        let t = header
            .get(name)
            .ok_or_else(|| err(path, format!("no tensor `{name}`")))?;
        if t.get("dtype").and_then(Value::as_str) != Some(dtype) {
            return Err(err(path, format!("tensor `{name}` is not {dtype}")));
        }
        let shape: Vec<usize> =
            serde_json::from_value(t.get("shape").cloned().unwrap_or(Value::Null))
                .map_err(|_| err(path, format!("tensor `{name}` has a bad shape")))?;
        let off: [usize; 2] =
            serde_json::from_value(t.get("data_offsets").cloned().unwrap_or(Value::Null))
                .map_err(|_| err(path, format!("tensor `{name}` has bad offsets")))?;
        if off[0] > off[1] || off[1] > data.len() {
            return Err(err(path, format!("tensor `{name}` lies outside the file")));
        }
        Ok((shape, &data[off[0]..off[1]]))
    };
    let dec = |b: &[u8]| -> Vec<F> {
        b.chunks_exact(std::mem::size_of::<F>())
            .map(F::read_le)
            .collect()
    };
    let mut names: Vec<(usize, String)> = header
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("param/")?;
            let begin = v.get("data_offsets")?.get(0)?.as_u64()? as usize;
            Some((begin, name.to_string()))
        })
        .collect();
    names.sort();
    let mut state = TrainingSnapshot {
        spec_hash: m("spec_hash")?,
        step: num("step")? as u64,
        total_tokens: num("total_tokens")? as u64,
        flops_used: num("flops_used")?,
        elapsed_seconds: num("elapsed_seconds")?,
        params: Vec::new(),
        adam_m: Vec::new(),
        adam_v: Vec::new(),
        router_bias: Vec::new(),
    };
    for (_, name) in names {
        let (shape, b) = tensor(&format!("param/{name}"), F::DTYPE)?;
        state
            .adam_m
            .push(dec(tensor(&format!("adam_m/{name}"), F::DTYPE)?.1));
        state
            .adam_v
            .push(dec(tensor(&format!("adam_v/{name}"), F::DTYPE)?.1));
        state.params.push((name, shape, dec(b)));
    }
    let mut l = 0;
    while let Ok((_, b)) = tensor(&format!("router_bias/layer_{l}"), "F64") {
        state.router_bias.push(
            b.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        );
        l += 1;
    }
    Ok(state)
}
