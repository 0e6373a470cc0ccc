//! Incremental decoding with a key/value cache: each new token costs one position's forward.
//!
//! [`Decoder::feed`] runs one token through the model on the backend with the same ops as the
//! training forward (RMSNorm, the projections, RoPE at the token's position, the router and the
//! experts), except attention: the new token's query attends to the cached keys and values of
//! every earlier position on the host (the cache lives there; one query row is `H x pos x D`
//! work, and the device path then moves `3C` values per layer and token, not the context).
//! Routing at inference is dropless, as [`Model::logits`] is. The result is the same for any
//! CPU thread count. Not here: choosing the next token ([`crate::sampling`]) or text.

use crate::backend::{AttnDims, Backend, Groups, RopeTables};
use crate::error::RunnerError;
use crate::model::Model;
use crate::scalar::Real;

/// One layer's cached keys and values, `[H][pos][D]` flattened per head.
#[derive(Debug, Default)]
struct LayerKv {
    /// Per head, the rotated keys of every position so far.
    k: Vec<Vec<f32>>,
    /// Per head, the values of every position so far.
    v: Vec<Vec<f32>>,
}

/// A model, its parameters and the cache of the tokens fed so far.
pub struct Decoder<'m, B: Backend> {
    model: &'m Model,
    be: &'m B,
    params: &'m [B::Buf],
    bias: &'m [Vec<f64>],
    cache: Vec<LayerKv>,
    pos: usize,
}

impl<B: Backend> std::fmt::Debug for Decoder<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("position", &self.pos)
            .finish()
    }
}

impl<'m, B: Backend> Decoder<'m, B> {
    /// An empty cache over `params` (the model's layout) and the per-layer selection bias.
    pub fn new(model: &'m Model, be: &'m B, params: &'m [B::Buf], bias: &'m [Vec<f64>]) -> Self {
        let h = model.dims.n_heads;
        let cache = (0..model.dims.n_layers)
            .map(|_| LayerKv {
                k: vec![Vec::new(); h],
                v: vec![Vec::new(); h],
            })
            .collect();
        Self {
            model,
            be,
            params,
            bias,
            cache,
            pos: 0,
        }
    }

    /// Tokens fed so far (the position the next one takes).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Feeds one token at the next position and returns the logits `[V]` of the token after it.
    /// Past the model's context (`seq_len`) there is no position left: an error.
    pub fn feed(&mut self, token: u32) -> Result<Vec<f32>, RunnerError> {
        let (model, be, params) = (self.model, self.be, self.params);
        let d = &model.dims;
        let (c, v) = (d.d_model, d.vocab);
        if self.pos >= d.seq_len {
            return Err(RunnerError::Invalid {
                field: "position",
                value: self.pos.to_string(),
                accepted: format!("the model's context is seq_len = {} tokens", d.seq_len),
            });
        }
        if token as usize >= v {
            return Err(RunnerError::Invalid {
                field: "token",
                value: token.to_string(),
                accepted: format!("token ids are below the vocabulary size {v}"),
            });
        }
        let heads = d.n_heads;
        let hd = c / heads;
        let ad = AttnDims {
            b: 1,
            t: 1,
            h: heads,
            d: hd,
        };
        let (cos, sin) = model.rope_row(self.pos);
        let up =
            |row: &[f64]| be.upload(&row.iter().map(|&x| B::F::from_f64(x)).collect::<Vec<_>>());
        let rope = RopeTables {
            cos: up(cos),
            sin: up(sin),
        };
        let ids = be.upload_ids(&[token]);
        let mut x = be.zeros(c);
        be.embedding_fwd(&mut x, &params[model.wte_index()], &ids, c);
        for (li, ix) in model.layer_indices().enumerate() {
            let qkvh = model
                .attention_inputs(be, params, ix, &x, 1, rope.each_ref(), ad)
                .heads;
            let host = |b: &B::Buf| -> Vec<f32> {
                be.download(b)
                    .into_iter()
                    .map(|x| x.to_f64() as f32)
                    .collect()
            };
            let (q, k, val) = (host(&qkvh.q), host(&qkvh.k), host(&qkvh.v));
            let kv = &mut self.cache[li];
            let mut y = vec![B::F::from_f64(0.0); c];
            let scale = 1.0 / (hd as f64).sqrt();
            for h in 0..heads {
                let span = h * hd..(h + 1) * hd;
                kv.k[h].extend_from_slice(&k[span.clone()]);
                kv.v[h].extend_from_slice(&val[span.clone()]);
                let qh = &q[span.clone()];
                let len = self.pos + 1;
                // Scores in f64, softmax with the running maximum subtracted.
                let mut s: Vec<f64> = (0..len)
                    .map(|t| {
                        let kt = &kv.k[h][t * hd..(t + 1) * hd];
                        qh.iter()
                            .zip(kt)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mut z = 0.0;
                for x in &mut s {
                    *x = (*x - max).exp();
                    z += *x;
                }
                for (i, out) in y[span].iter_mut().enumerate() {
                    let acc: f64 = (0..len).map(|t| s[t] * kv.v[h][t * hd + i] as f64).sum();
                    *out = B::F::from_f64(acc / z);
                }
            }
            // One token: the heads' outputs side by side are already the merged row.
            let ym = be.upload(&y);
            let mut ao = be.zeros(c);
            be.linear_fwd(&mut ao, &ym, &params[ix.wo], &Groups::dense(1, c, c));
            let mut x_mid = be.duplicate(&x);
            be.add_assign(&mut x_mid, &ao);
            let mut ln2 = be.zeros(c);
            let mut rstd2 = be.zeros(1);
            be.rmsnorm_fwd(&mut ln2, &mut rstd2, &x_mid, &params[ix.ln2], c, d.norm_eps);
            let moe = model.moe_fwd(be, params, li, &self.bias[li], &ln2, 1, None);
            let mut x_out = x_mid;
            be.add_assign(&mut x_out, &moe.out);
            x = x_out;
        }
        let mut lnf = be.zeros(c);
        let mut rstdf = be.zeros(1);
        be.rmsnorm_fwd(
            &mut lnf,
            &mut rstdf,
            &x,
            &params[model.lnf_index()],
            c,
            d.norm_eps,
        );
        let mut logits = be.zeros(v);
        be.linear_fwd(
            &mut logits,
            &lnf,
            &params[model.lm_head_index()],
            &Groups::dense(1, c, v),
        );
        self.pos += 1;
        Ok(be
            .download(&logits)
            .into_iter()
            .map(|x| x.to_f64() as f32)
            .collect())
    }
}
