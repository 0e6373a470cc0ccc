//! Incremental decoding with a key/value cache: each new token costs one position's forward.
//!
//! [`Decoder::feed`] runs tokens through the model on the backend with the same ops as the
//! training forward (RMSNorm, the projections, RoPE at each token's position, the router and
//! the experts), except attention: each new token's query attends to the cached keys and values
//! of every earlier position on the host (the cache lives there; one query row is `H x pos x D`
//! work, and the device path then moves `3C` values per layer and token, not the context).
//! Feeding several tokens at once (a prompt) runs them as one batched forward whose every row
//! is what feeding it alone computes: every op is per row and each product's per-element chain
//! is the same whatever its row count (see the gemm module), so the bits do not depend on how
//! the tokens were split. Routing at inference is dropless, as [`Model::logits`] is. The result
//! is the same for any CPU thread count.
//!
//! [`DecodeWeights`] holds the parameters in the layout the backend reads one row's products
//! from fastest ([`Backend::decode_layout`]), made once per snapshot and shared by its decoders.
//! Not here: choosing the next token ([`crate::sampling`]) or text.

use crate::backend::{AttnDims, Backend, Groups, RopeTables, WeightLayout};
use crate::error::RunnerError;
use crate::model::{Model, Weights};
use crate::scalar::Real;

/// A model's parameters as its decoders read them: the trained buffers themselves, and, where
/// the backend's [`Backend::decode_layout`] differs, a copy of every linear layer's weight
/// matrices laid out so (the same values, so the same bits; the copy costs the linear weights'
/// memory once more). A decoder reads the copy for one token and the trained buffers for a
/// batch of them (a prompt), where the packed products read them best.
pub struct DecodeWeights<'p, B: Backend> {
    params: &'p [B::Buf],
    /// By parameter index, the linear weights' copies.
    relaid: Option<Vec<Option<B::Buf>>>,
    layout: WeightLayout,
}

impl<B: Backend> std::fmt::Debug for DecodeWeights<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeWeights")
            .field("layout", &self.layout)
            .finish()
    }
}

impl<'p, B: Backend> DecodeWeights<'p, B> {
    /// `params` (the model's layout, as trained) as `be`'s decoders read them.
    pub fn new(model: &Model, be: &B, params: &'p [B::Buf]) -> Self {
        Self::with_layout(model, be, params, be.decode_layout())
    }

    /// `params` with a copy in `layout` for one token's products, whatever the backend
    /// prefers (the tests compare the layouts).
    pub fn with_layout(model: &Model, be: &B, params: &'p [B::Buf], layout: WeightLayout) -> Self {
        let relaid = match layout {
            WeightLayout::OutIn => None,
            WeightLayout::Panels => {
                let linear = model.linear_weight_indices();
                Some(
                    params
                        .iter()
                        .enumerate()
                        .map(|(i, buf)| {
                            let shape = &model.params[i].shape;
                            (linear.contains(&i) && shape.len() >= 2).then(|| {
                                let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
                                be.panel_matrices(buf, rows, cols)
                            })
                        })
                        .collect(),
                )
            }
        };
        Self {
            params,
            relaid,
            layout,
        }
    }

    /// The weights as a forward of `rows` tokens reads them: the copy for a few (one token's
    /// products), the trained buffers for more.
    pub fn weights(&self, rows: usize) -> Weights<'_, B> {
        match &self.relaid {
            Some(relaid) if rows <= FEW_ROWS => Weights::relaid(self.params, relaid, self.layout),
            _ => Weights::trained(self.params),
        }
    }
}

/// The most tokens a forward reads [`DecodeWeights`]' copy for (the products the CPU's thin
/// path takes); a longer batch reads the trained layout.
const FEW_ROWS: usize = 4;

/// `out[t] = scale * (q . keys[t])` for each cached key `t` (`keys` is `[len, D]`), each dot
/// product one f64 sum in order over `D`; four keys at a time so that their sums, which do not
/// depend on each other, overlap.
fn scores(q: &[f32], keys: &[f32], scale: f64, out: &mut Vec<f64>) {
    let hd = q.len();
    out.clear();
    let mut quads = keys.chunks_exact(4 * hd);
    for quad in &mut quads {
        let (k0, rest) = quad.split_at(hd);
        let (k1, rest) = rest.split_at(hd);
        let (k2, k3) = rest.split_at(hd);
        let mut d = [0f64; 4];
        for (j, &qj) in q.iter().enumerate() {
            let qj = qj as f64;
            d[0] += qj * k0[j] as f64;
            d[1] += qj * k1[j] as f64;
            d[2] += qj * k2[j] as f64;
            d[3] += qj * k3[j] as f64;
        }
        out.extend(d.iter().map(|&x| x * scale));
    }
    for kt in quads.remainder().chunks_exact(hd) {
        let mut d = 0f64;
        for (&qj, &kj) in q.iter().zip(kt) {
            d += qj as f64 * kj as f64;
        }
        out.push(d * scale);
    }
}

/// One layer's cached keys and values, `[H][pos][D]` flattened per head.
#[derive(Debug, Default)]
struct LayerKv {
    /// Per head, the rotated keys of every position so far.
    k: Vec<Vec<f32>>,
    /// Per head, the values of every position so far.
    v: Vec<Vec<f32>>,
}

/// A model, its weights and the cache of the tokens fed so far.
pub struct Decoder<'m, B: Backend> {
    model: &'m Model,
    be: &'m B,
    weights: &'m DecodeWeights<'m, B>,
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
    /// An empty cache over `weights` and the per-layer selection bias.
    pub fn new(
        model: &'m Model,
        be: &'m B,
        weights: &'m DecodeWeights<'m, B>,
        bias: &'m [Vec<f64>],
    ) -> Self {
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
            weights,
            bias,
            cache,
            pos: 0,
        }
    }

    /// Tokens fed so far (the position the next one takes).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Feeds `tokens` (at least one) at the next positions, in one batched forward, and
    /// returns the logits `[V]` of the token after the last. Past the model's context
    /// (`seq_len`) there is no position left: an error, and nothing is fed.
    pub fn feed_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>, RunnerError> {
        let (model, be) = (self.model, self.be);
        let d = &model.dims;
        let (c, v, n) = (d.d_model, d.vocab, tokens.len());
        let w = self.weights.weights(n);
        if n == 0 {
            return Err(RunnerError::Invalid {
                field: "tokens",
                value: "[]".into(),
                accepted: "at least one token to feed".into(),
            });
        }
        if self.pos + n > d.seq_len {
            return Err(RunnerError::Invalid {
                field: "position",
                value: (self.pos + n - 1).to_string(),
                accepted: format!("the model's context is seq_len = {} tokens", d.seq_len),
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= v) {
            return Err(RunnerError::Invalid {
                field: "token",
                value: bad.to_string(),
                accepted: format!("token ids are below the vocabulary size {v}"),
            });
        }
        let heads = d.n_heads;
        let hd = c / heads;
        let ad = AttnDims {
            b: 1,
            t: n,
            h: heads,
            d: hd,
        };
        // One table row per position fed: `rope_row(pos + i)` for the sequence's row i.
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for p in self.pos..self.pos + n {
            let (cr, sr) = model.rope_row(p);
            cos.extend(cr.iter().map(|&x| B::F::from_f64(x)));
            sin.extend(sr.iter().map(|&x| B::F::from_f64(x)));
        }
        let rope = RopeTables {
            cos: be.upload(&cos),
            sin: be.upload(&sin),
        };
        let ids = be.upload_ids(tokens);
        let mut x = be.zeros(n * c);
        be.embedding_fwd(&mut x, &w.bufs[model.wte_index()], &ids, c);
        let host = |b: &B::Buf| -> Vec<f32> {
            be.download(b)
                .into_iter()
                .map(|x| x.to_f64() as f32)
                .collect()
        };
        let scale = 1.0 / (hd as f64).sqrt();
        for (li, ix) in model.layer_indices().enumerate() {
            let qkvh = model
                .attention_inputs(be, w, ix, &x, n, rope.each_ref(), ad)
                .heads;
            // `[H, n, D]` each.
            let (q, k, val) = (host(&qkvh.q), host(&qkvh.k), host(&qkvh.v));
            let kv = &mut self.cache[li];
            // Row i's heads side by side: the merged `[n, C]` rows.
            let mut y = vec![B::F::from_f64(0.0); n * c];
            let mut s = Vec::with_capacity(self.pos + n);
            let mut acc = vec![0f64; hd];
            for h in 0..heads {
                let rows = h * n * hd..(h + 1) * n * hd;
                kv.k[h].extend_from_slice(&k[rows.clone()]);
                kv.v[h].extend_from_slice(&val[rows]);
                for i in 0..n {
                    let qh = &q[(h * n + i) * hd..(h * n + i + 1) * hd];
                    let len = self.pos + i + 1;
                    // Scores in f64, softmax with the running maximum subtracted.
                    scores(qh, &kv.k[h][..len * hd], scale, &mut s);
                    let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let mut z = 0.0;
                    for x in &mut s {
                        *x = (*x - max).exp();
                        z += *x;
                    }
                    // Each output element a sum over the positions in order, all of them
                    // advancing together position by position.
                    acc.fill(0.0);
                    for (&st, vt) in s.iter().zip(kv.v[h].chunks_exact(hd)) {
                        for (a, &x) in acc.iter_mut().zip(vt) {
                            *a += st * x as f64;
                        }
                    }
                    let out = &mut y[i * c + h * hd..i * c + (h + 1) * hd];
                    for (o, &a) in out.iter_mut().zip(&acc) {
                        *o = B::F::from_f64(a / z);
                    }
                }
            }
            let ym = be.upload(&y);
            let mut ao = be.zeros(n * c);
            w.linear_fwd(be, &mut ao, &ym, ix.wo, Groups::dense(n, c, c));
            let mut x_mid = be.duplicate(&x);
            be.add_assign(&mut x_mid, &ao);
            let mut ln2 = be.zeros(n * c);
            let mut rstd2 = be.zeros(n);
            be.rmsnorm_fwd(&mut ln2, &mut rstd2, &x_mid, &w.bufs[ix.ln2], c, d.norm_eps);
            let moe = model.moe_fwd(be, w, li, &self.bias[li], &ln2, n, None);
            let mut x_out = x_mid;
            be.add_assign(&mut x_out, &moe.out);
            x = x_out;
        }
        self.pos += n;
        // The next token's logits need only the last row (a batch's, taken through the host;
        // one token's is `x` itself, with no round trip on the per-token path).
        let last = if n == 1 {
            x
        } else {
            be.upload(&be.download(&x)[(n - 1) * c..])
        };
        let mut lnf = be.zeros(c);
        let mut rstdf = be.zeros(1);
        be.rmsnorm_fwd(
            &mut lnf,
            &mut rstdf,
            &last,
            &w.bufs[model.lnf_index()],
            c,
            d.norm_eps,
        );
        let w = self.weights.weights(1);
        let mut logits = be.zeros(v);
        w.linear_fwd(
            be,
            &mut logits,
            &lnf,
            model.lm_head_index(),
            Groups::dense(1, c, v),
        );
        Ok(host(&logits))
    }

    /// Feeds one token at the next position and returns the logits `[V]` of the token after it.
    pub fn feed(&mut self, token: u32) -> Result<Vec<f32>, RunnerError> {
        self.feed_all(&[token])
    }
}
