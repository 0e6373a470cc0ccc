//! The runner's model in Hugging Face `transformers` terms: the class that computes exactly
//! the same function (its twin), that class's `config.json`, and the parameters renamed and
//! laid out the way it loads them.
//!
//! | score | twin | `combine_scale` | selection bias |
//! |---|---|---|---|
//! | sigmoid | `Glm4MoeForCausalLM` | `routed_scaling_factor` | `mlp.gate.e_score_correction_bias [E]` |
//! | softmax | `Ernie4_5_MoeForCausalLM` | folded into the routed experts' `down_proj` | `mlp.gate.moe_statics.e_score_correction_bias [1, E]` |
//!
//! Both twins are pre-norm RMSNorm (gain after normalising, no `1 + w`), multi-head attention
//! without biases or q/k norm, SwiGLU experts with fused `gate_up_proj [E, 2F, C]` (gate rows
//! first) and `down_proj [E, C, F]`, top-k on the biased scores with weights from the unbiased
//! ones renormalised over the k, one shared MLP of width `n_shared * F` (the sum of `n_shared`
//! SwiGLUs of width F is one SwiGLU over their concatenated rows), dropless routing, and an
//! untied `lm_head`. Glm4Moe rotates pairs `(i, i + D/2)` as the runner does; Ernie pairs
//! `(2i, 2i+1)`, so its q and k rows are permuted within each head (`hf[2i] = ours[i]`,
//! `hf[2i+1] = ours[D/2 + i]`), which leaves every attention score unchanged. The settings
//! that would make a twin differ are pinned in the config (`partial_rotary_factor = 1`,
//! `first_k_dense_replace = 0`, `n_group = topk_group = 1`, `norm_topk_prob`,
//! `use_qk_norm = false`, `moe_layer_start_index = 0`, `tie_word_embeddings = false`).
//! Glm4Moe's grouped routing takes the top two scores of a group, so a sigmoid model needs at
//! least two experts; a model with one is refused. Capacity limits are a training device:
//! inference (glassbox's and the twin's) is dropless.
//!
//! Not here: files, the tokenizer or the model card (the lab writes those).

use serde_json::{Value, json};

use crate::backend::ScoreKind;
use crate::error::RunnerError;
use crate::model::ModelDims;

/// The `transformers` class a model is exported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Twin {
    /// Sigmoid scores.
    Glm4Moe,
    /// Softmax scores.
    Ernie45Moe,
}

impl Twin {
    /// The class name in `config.json`'s `architectures`.
    pub fn architecture(self) -> &'static str {
        match self {
            Twin::Glm4Moe => "Glm4MoeForCausalLM",
            Twin::Ernie45Moe => "Ernie4_5_MoeForCausalLM",
        }
    }

    /// `config.json`'s `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Twin::Glm4Moe => "glm4_moe",
            Twin::Ernie45Moe => "ernie4_5_moe",
        }
    }

    /// The twin of `dims`, or why there is none.
    pub fn of(dims: &ModelDims) -> Result<Self, RunnerError> {
        match dims.score {
            ScoreKind::Sigmoid if dims.n_experts < 2 => Err(RunnerError::Unsupported {
                field: "model.moe.n_experts",
                value: dims.n_experts.to_string(),
                fix: "exporting a sigmoid-scored model needs at least 2 experts: its twin, \
                      Glm4MoeForCausalLM, ranks groups by their top two scores"
                    .into(),
            }),
            ScoreKind::Sigmoid => Ok(Twin::Glm4Moe),
            ScoreKind::Softmax => Ok(Twin::Ernie45Moe),
        }
    }
}

/// Token ids the config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpecialIds {
    /// Beginning of text, if the tokenizer has one.
    pub bos: Option<u32>,
    /// End of text, if the tokenizer has one.
    pub eos: Option<u32>,
}

/// A model ready to write: its twin, `config.json`, and its tensors in the twin's names.
#[derive(Debug, Clone)]
pub struct HfModel {
    /// The class.
    pub twin: Twin,
    /// `config.json`.
    pub config: Value,
    /// `(name, shape, values)` in the twin's layout, f32.
    pub tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
}

/// `params` (the model's layout, as a snapshot holds them) and the per-layer selection bias in
/// `twin`'s terms.
pub fn convert(
    dims: &ModelDims,
    params: &[(String, Vec<usize>, Vec<f32>)],
    bias: &[Vec<f64>],
    ids: SpecialIds,
) -> Result<HfModel, RunnerError> {
    let twin = Twin::of(dims)?;
    let (c, e, f, sh, l) = (
        dims.d_model,
        dims.n_experts,
        dims.d_expert,
        dims.n_shared,
        dims.n_layers,
    );
    let hd = c / dims.n_heads;
    let get = |name: &str| -> Result<&[f32], RunnerError> {
        params
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, v)| v.as_slice())
            .ok_or_else(|| RunnerError::Backend(format!("the snapshot has no tensor {name}")))
    };
    if bias.len() != l || bias.iter().any(|b| b.len() != e) {
        return Err(RunnerError::Backend(format!(
            "the snapshot's selection bias is not {l} layers of {e} experts"
        )));
    }
    let mut t: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    t.push((
        "model.embed_tokens.weight".into(),
        vec![dims.vocab, c],
        get("wte")?.to_vec(),
    ));
    for (li, layer_bias) in bias.iter().enumerate() {
        let p = |s: &str| format!("model.layers.{li}.{s}");
        let g = |s: &str| get(&format!("layers.{li}.{s}"));
        t.push((p("input_layernorm.weight"), vec![c], g("ln1")?.to_vec()));
        t.push((
            p("post_attention_layernorm.weight"),
            vec![c],
            g("ln2")?.to_vec(),
        ));
        let wqkv = g("attn.wqkv")?;
        for (j, name) in ["q_proj", "k_proj", "v_proj"].iter().enumerate() {
            let rows = &wqkv[j * c * c..(j + 1) * c * c];
            let rows = if twin == Twin::Ernie45Moe && j < 2 {
                interleave_rope_rows(rows, c, hd)
            } else {
                rows.to_vec()
            };
            t.push((p(&format!("self_attn.{name}.weight")), vec![c, c], rows));
        }
        t.push((
            p("self_attn.o_proj.weight"),
            vec![c, c],
            g("attn.wo")?.to_vec(),
        ));
        t.push((p("mlp.gate.weight"), vec![e, c], g("moe.router")?.to_vec()));
        let b: Vec<f32> = layer_bias.iter().map(|&x| x as f32).collect();
        match twin {
            Twin::Glm4Moe => t.push((p("mlp.gate.e_score_correction_bias"), vec![e], b)),
            Twin::Ernie45Moe => t.push((
                p("mlp.gate.moe_statics.e_score_correction_bias"),
                vec![1, e],
                b,
            )),
        }
        t.push((
            p("mlp.experts.gate_up_proj"),
            vec![e, 2 * f, c],
            g("moe.w13")?.to_vec(),
        ));
        let mut w2 = g("moe.w2")?.to_vec();
        if twin == Twin::Ernie45Moe && dims.combine_scale != 1.0 {
            // Ernie has no routed scale: the combine is linear in each expert's output.
            let s = dims.combine_scale as f32;
            w2.iter_mut().for_each(|x| *x *= s);
        }
        t.push((p("mlp.experts.down_proj"), vec![e, c, f], w2));
        if sh > 0 || twin == Twin::Glm4Moe {
            // Glm4Moe builds its shared MLP whatever n_shared is: zero-width tensors load it.
            let (ws13, ws2) = (g("moe.shared_w13")?, g("moe.shared_w2")?);
            let mut gate = Vec::with_capacity(sh * f * c);
            let mut up = Vec::with_capacity(sh * f * c);
            for s in 0..sh {
                let block = &ws13[s * 2 * f * c..(s + 1) * 2 * f * c];
                gate.extend_from_slice(&block[..f * c]);
                up.extend_from_slice(&block[f * c..]);
            }
            let mut down = Vec::with_capacity(c * sh * f);
            for row in 0..c {
                for s in 0..sh {
                    let start = s * c * f + row * f;
                    down.extend_from_slice(&ws2[start..start + f]);
                }
            }
            t.push((
                p("mlp.shared_experts.gate_proj.weight"),
                vec![sh * f, c],
                gate,
            ));
            t.push((p("mlp.shared_experts.up_proj.weight"), vec![sh * f, c], up));
            t.push((
                p("mlp.shared_experts.down_proj.weight"),
                vec![c, sh * f],
                down,
            ));
        }
    }
    t.push(("model.norm.weight".into(), vec![c], get("lnf")?.to_vec()));
    t.push((
        "lm_head.weight".into(),
        vec![dims.vocab, c],
        get("lm_head")?.to_vec(),
    ));
    Ok(HfModel {
        twin,
        config: config(twin, dims, ids),
        tensors: t,
    })
}

/// Rows `[H * D, C]` of q or k with each head's rows reordered from pairs `(i, i + D/2)` to
/// pairs `(2i, 2i + 1)`.
fn interleave_rope_rows(rows: &[f32], c: usize, hd: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows.len()];
    let half = hd / 2;
    for h in 0..c / hd {
        for i in 0..half {
            for (to, from) in [(2 * i, i), (2 * i + 1, half + i)] {
                let dst = (h * hd + to) * c;
                let src = (h * hd + from) * c;
                out[dst..dst + c].copy_from_slice(&rows[src..src + c]);
            }
        }
    }
    out
}

/// `config.json` for `twin`.
fn config(twin: Twin, d: &ModelDims, ids: SpecialIds) -> Value {
    let hd = d.d_model / d.n_heads;
    let mut v = json!({
        "architectures": [twin.architecture()],
        "model_type": twin.model_type(),
        "vocab_size": d.vocab,
        "hidden_size": d.d_model,
        "num_hidden_layers": d.n_layers,
        "num_attention_heads": d.n_heads,
        "num_key_value_heads": d.n_heads,
        "head_dim": hd,
        "hidden_act": "silu",
        "max_position_embeddings": d.seq_len,
        "rms_norm_eps": d.norm_eps,
        "tie_word_embeddings": false,
        "use_cache": true,
        "bos_token_id": ids.bos,
        "eos_token_id": ids.eos,
        "pad_token_id": null,
        "dtype": "float32",
        "intermediate_size": d.d_expert * d.n_shared.max(1),
        "moe_intermediate_size": d.d_expert,
    });
    let extra = match twin {
        Twin::Glm4Moe => json!({
            "rope_parameters": {"rope_type": "default", "rope_theta": d.rope_theta,
                                "partial_rotary_factor": 1.0},
            "partial_rotary_factor": 1.0,
            "rope_theta": d.rope_theta,
            "attention_bias": false,
            "use_qk_norm": false,
            "n_routed_experts": d.n_experts,
            "num_experts_per_tok": d.top_k,
            "n_shared_experts": d.n_shared,
            "norm_topk_prob": true,
            "routed_scaling_factor": d.combine_scale,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 0,
            "num_nextn_predict_layers": 0,
        }),
        Twin::Ernie45Moe => json!({
            "rope_parameters": {"rope_type": "default", "rope_theta": d.rope_theta},
            "rope_theta": d.rope_theta,
            "use_bias": false,
            "moe_num_experts": d.n_experts,
            "moe_k": d.top_k,
            "moe_num_shared_experts": d.n_shared,
            "moe_layer_start_index": 0,
            "moe_layer_end_index": d.n_layers.saturating_sub(1),
            "moe_layer_interval": 1,
            "moe_norm_min": 1e-12,
        }),
    };
    if let (Some(obj), Some(more)) = (v.as_object_mut(), extra.as_object()) {
        obj.extend(more.clone());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_moves_pair_partners_next_to_each_other() {
        // One head of size 4 over c = 4 columns: rows 0..4 hold 0, 1, 2, 3 everywhere.
        let rows: Vec<f32> = (0..4).flat_map(|r| [r as f32; 4]).collect();
        let out = interleave_rope_rows(&rows, 4, 4);
        let firsts: Vec<f32> = out.chunks(4).map(|r| r[0]).collect();
        assert_eq!(firsts, vec![0.0, 2.0, 1.0, 3.0]);
    }
}
