//! Scoring continuations that share a context with the context run once: a multiple-choice
//! item's context and its choices go through the model as one packed sequence, each choice's
//! tokens at the positions they would have after the context, attending to the context and to
//! their own earlier tokens only (a tree of sequences, not a chain).
//!
//! Every op but attention is the backend's, over all the packed tokens of a batch of items at
//! once (RMSNorm, the projections, RoPE with a table row per token's position, the router and
//! the experts: row-wise, so a token's result does not depend on what else is packed beside
//! it). Attention runs on the host, per group (in parallel) and head, over the keys each token
//! may see, with the CPU kernel's own arithmetic ([`attend_group`]), and the output projection
//! only for the positions whose next token is scored. So each continuation costs its own tokens, not its context again, and on the CPU
//! its log-likelihood has the bits of the batched forward over its own context and
//! continuation: the same for any batching, any packing and any thread count.
//!
//! Not here: requests longer than the model's context (their context would be cut differently
//! per continuation; [`crate::inference::continuation_logliks`] runs those as separate rows),
//! or the log-softmax of the logits (the caller's).

use std::collections::HashMap;
use std::ops::Range;

use rayon::prelude::*;

use crate::backend::cpu::expf::exp_scaled_shifted;
use crate::backend::cpu::gemm::{GemmShape, Mat, MatMut, Tiles, gemm_into};
use crate::backend::{Accumulate, AttnDims, Backend, Groups, RopeTables};
use crate::model::{Model, Weights};
use crate::scalar::Real;

/// Packed tokens per forward (bounds the activations held at once: a few `N x max(3C, E F)`
/// buffers); a group is never split, so a forward may exceed it by one group.
const TOKENS_PER_FORWARD: usize = 1024;

/// One head's attention for the packed rows of one group (`q`, `k`, `v`: `[n, D]`, the
/// group's rows of that head), into `out [n, D]`, row `t` seeing the group's rows
/// `sees[t].0` then `sees[t].1` (offsets within the group). The arithmetic is the CPU attention
/// kernel's for a query that sees exactly those keys in that order: the scores by the same
/// GEMM (each one fused multiply-add chain over `D`), the scaled maximum over the visible
/// scores, the backend's exponential, their sum in key order, the reciprocal; then `P v` by
/// the GEMM with `P` zero at the keys a row does not see (a zero term leaves a chain as it
/// was), so each visible key enters the output's chain in the order it does in the batched
/// forward of the row's own sequence. So a token here gets the bits it gets there.
fn attend_group<F: Real>(
    q: &[F],
    k: &[F],
    v: &[F],
    sees: &[(Range<usize>, Range<usize>)],
    scratch: &mut GroupScratch<F>,
    out: &mut [F],
) {
    let n = sees.len();
    let d = q.len() / n;
    let scale = F::from_f64(1.0 / (d as f64).sqrt());
    let GroupScratch { p, row } = scratch;
    p.clear();
    p.resize(n * n, F::ZERO);
    gemm_into(
        GemmShape { m: n, n, k: d },
        MatMut::rows(p, n),
        Mat::rows(q, d),
        Mat::transposed(k, d),
        Accumulate::Overwrite,
        Tiles::Serial,
    );
    for (t, (context, own)) in sees.iter().enumerate() {
        let pr = &mut p[t * n..(t + 1) * n];
        row.clear();
        row.extend(context.clone().chain(own.clone()).map(|j| pr[j]));
        let mut mx = row[0] * scale;
        for &s in &row[1..] {
            mx = mx.max(s * scale);
        }
        match F::as_f32_mut(row) {
            Some(r) => exp_scaled_shifted(r, scale.to_f64() as f32, mx.to_f64() as f32),
            None => {
                for s in row.iter_mut() {
                    *s = (*s * scale - mx).exp();
                }
            }
        }
        let mut sum = F::ZERO;
        for &s in row.iter() {
            sum += s;
        }
        let inv = F::ONE / sum;
        pr.fill(F::ZERO);
        for (j, &s) in context.clone().chain(own.clone()).zip(row.iter()) {
            pr[j] = s * inv;
        }
    }
    gemm_into(
        GemmShape { m: n, n: d, k: n },
        MatMut::rows(out, d),
        Mat::rows(p, n),
        Mat::rows(v, d),
        Accumulate::Overwrite,
        Tiles::Serial,
    );
}

/// What [`attend_group`] reuses between calls: the probabilities `[n, n]` and one row's
/// visible scores.
struct GroupScratch<F> {
    p: Vec<F>,
    row: Vec<F>,
}

/// Requests sharing one context: the context's tokens and, per request, its continuation.
struct Group<'r> {
    context: &'r [u32],
    /// `(request index, continuation tokens)`.
    members: Vec<(usize, &'r [u32])>,
}

impl Group<'_> {
    /// Tokens the group feeds: the context, then each continuation but its last token (a
    /// continuation's last token is only predicted).
    fn fed(&self) -> usize {
        self.context.len() + self.members.iter().map(|(_, c)| c.len() - 1).sum::<usize>()
    }
}

/// `requests` (context then continuation, and how many of the last tokens are the
/// continuation) grouped by identical context, in order of first appearance.
fn groups<'r>(requests: &[(usize, &'r [u32], usize)]) -> Vec<Group<'r>> {
    let mut out: Vec<Group<'r>> = Vec::new();
    let mut at: HashMap<&'r [u32], usize> = HashMap::new();
    for &(i, tokens, continuation) in requests {
        let (context, cont) = tokens.split_at(tokens.len() - continuation);
        let g = *at.entry(context).or_insert_with(|| {
            out.push(Group {
                context,
                members: Vec::new(),
            });
            out.len() - 1
        });
        out[g].members.push((i, cont));
    }
    out
}

/// The log-likelihood of each request's continuation into `out[i]`, for requests
/// `(i, tokens, continuation)` that fit the model's context (`tokens.len() <= seq_len + 1`,
/// `0 < continuation < tokens.len()`; checked by the caller). `logsoftmax(row, target)` turns
/// one logits row into the target's log-probability. `false` when `cancelled` turned true
/// between forwards.
#[allow(clippy::too_many_arguments)]
pub(crate) fn shared_context_logliks<B: Backend>(
    model: &Model,
    be: &B,
    params: &[B::Buf],
    bias: &[Vec<f64>],
    requests: &[(usize, &[u32], usize)],
    out: &mut [f64],
    logsoftmax: fn(&[f32], usize) -> f64,
    cancelled: &dyn Fn() -> bool,
) -> bool {
    let groups = groups(requests);
    let mut start = 0;
    while start < groups.len() {
        if cancelled() {
            return false;
        }
        let mut end = start;
        let mut tokens = 0;
        while end < groups.len()
            && (end == start || tokens + groups[end].fed() <= TOKENS_PER_FORWARD)
        {
            tokens += groups[end].fed();
            end += 1;
        }
        forward_groups(
            model,
            be,
            params,
            bias,
            &groups[start..end],
            out,
            logsoftmax,
        );
        start = end;
    }
    true
}

/// Where a group's tokens sit in the packed batch.
struct Packed {
    /// Token ids, per group: the context, then each continuation but its last token.
    ids: Vec<u32>,
    /// Each packed token's position in its own sequence.
    positions: Vec<usize>,
    /// Each group's rows.
    groups: Vec<Range<usize>>,
    /// Per packed token: the rows of its group (offsets within the group) its query attends
    /// to are `context` then `own`.
    sees: Vec<(Range<usize>, Range<usize>)>,
    /// Per scored token: `(request index, packed row whose logits predict it, its id)`.
    scored: Vec<(usize, usize, u32)>,
}

fn pack(groups: &[Group<'_>]) -> Packed {
    let mut p = Packed {
        ids: Vec::new(),
        positions: Vec::new(),
        groups: Vec::new(),
        sees: Vec::new(),
        scored: Vec::new(),
    };
    for g in groups {
        let c0 = p.ids.len();
        let lc = g.context.len();
        for (t, &id) in g.context.iter().enumerate() {
            p.ids.push(id);
            p.positions.push(t);
            p.sees.push((0..t + 1, 0..0));
        }
        let last_context_row = c0 + lc - 1;
        for &(i, cont) in &g.members {
            let o0 = p.ids.len();
            for (j, &id) in cont[..cont.len() - 1].iter().enumerate() {
                p.ids.push(id);
                p.positions.push(lc + j);
                p.sees.push((0..lc, o0 - c0..o0 - c0 + j + 1));
            }
            for (j, &id) in cont.iter().enumerate() {
                let row = if j == 0 { last_context_row } else { o0 + j - 1 };
                p.scored.push((i, row, id));
            }
        }
        p.groups.push(c0..p.ids.len());
    }
    p
}

/// One forward over `groups` packed, adding each scored token's log-probability into `out`.
fn forward_groups<B: Backend>(
    model: &Model,
    be: &B,
    params: &[B::Buf],
    bias: &[Vec<f64>],
    groups: &[Group<'_>],
    out: &mut [f64],
    logsoftmax: fn(&[f32], usize) -> f64,
) {
    let d = &model.dims;
    let (c, v, heads) = (d.d_model, d.vocab, d.n_heads);
    let hd = c / heads;
    let half = hd / 2;
    let packed = pack(groups);
    let n = packed.ids.len();
    let ad = AttnDims {
        b: 1,
        t: n,
        h: heads,
        d: hd,
    };
    // RoPE tables with one row per packed token, at that token's own position.
    let (mut cos, mut sin) = (Vec::with_capacity(n * half), Vec::with_capacity(n * half));
    for &pos in &packed.positions {
        let (cs, sn) = model.rope_row(pos);
        cos.extend(cs.iter().map(|&x| B::F::from_f64(x)));
        sin.extend(sn.iter().map(|&x| B::F::from_f64(x)));
    }
    let rope = RopeTables {
        cos: be.upload(&cos),
        sin: be.upload(&sin),
    };
    let ids = be.upload_ids(&packed.ids);
    let mut x = be.zeros(n * c);
    be.embedding_fwd(&mut x, &params[model.wte_index()], &ids, c);
    for (li, ix) in model.layer_indices().enumerate() {
        let qkvh = model
            .attention_inputs(be, Weights::trained(params), ix, &x, n, rope.each_ref(), ad)
            .heads;
        // [H, N, D] on the host; the output row-major [N, C], heads side by side, each
        // group's rows (contiguous) on their own thread.
        let (q, k, val) = (
            be.download(&qkvh.q),
            be.download(&qkvh.k),
            be.download(&qkvh.v),
        );
        let mut y = vec![B::F::ZERO; n * c];
        let mut parts: Vec<(&mut [B::F], &Range<usize>)> = Vec::with_capacity(packed.groups.len());
        let mut rest = y.as_mut_slice();
        for g in &packed.groups {
            let (part, tail) = rest.split_at_mut(g.len() * c);
            parts.push((part, g));
            rest = tail;
        }
        parts.into_par_iter().for_each_init(
            || {
                (
                    GroupScratch {
                        p: Vec::new(),
                        row: Vec::new(),
                    },
                    Vec::new(),
                )
            },
            |(scratch, out), (yg, g)| {
                let rows = g.len();
                out.resize(rows * hd, B::F::ZERO);
                for h in 0..heads {
                    let at = h * n * hd + g.start * hd..h * n * hd + g.end * hd;
                    attend_group(
                        &q[at.clone()],
                        &k[at.clone()],
                        &val[at],
                        &packed.sees[g.clone()],
                        scratch,
                        out,
                    );
                    for t in 0..rows {
                        yg[t * c + h * hd..t * c + (h + 1) * hd]
                            .copy_from_slice(&out[t * hd..(t + 1) * hd]);
                    }
                }
            },
        );
        let ym = be.upload(&y);
        let mut ao = be.zeros(n * c);
        be.linear_fwd(&mut ao, &ym, &params[ix.wo], &Groups::dense(n, c, c));
        let mut x_mid = x;
        be.add_assign(&mut x_mid, &ao);
        let mut ln2 = be.zeros(n * c);
        let mut rstd2 = be.zeros(n);
        be.rmsnorm_fwd(&mut ln2, &mut rstd2, &x_mid, &params[ix.ln2], c, d.norm_eps);
        let moe = model.moe_fwd(be, Weights::trained(params), li, &bias[li], &ln2, n, None);
        be.add_assign(&mut x_mid, &moe.out);
        x = x_mid;
    }
    let mut lnf = be.zeros(n * c);
    let mut rstdf = be.zeros(n);
    be.rmsnorm_fwd(
        &mut lnf,
        &mut rstdf,
        &x,
        &params[model.lnf_index()],
        c,
        d.norm_eps,
    );
    // The output projection for the rows that predict a scored token only, each once.
    let lnf = be.download(&lnf);
    let mut rows: Vec<usize> = packed.scored.iter().map(|s| s.1).collect();
    rows.sort_unstable();
    rows.dedup();
    let mut picked = Vec::with_capacity(rows.len() * c);
    for &r in &rows {
        picked.extend_from_slice(&lnf[r * c..(r + 1) * c]);
    }
    let m = rows.len();
    let mut logits = be.zeros(m * v);
    be.linear_fwd(
        &mut logits,
        &be.upload(&picked),
        &params[model.lm_head_index()],
        &Groups::dense(m, c, v),
    );
    let logits: Vec<f32> = be
        .download(&logits)
        .into_iter()
        .map(|x| x.to_f64() as f32)
        .collect();
    for &(i, row, target) in &packed.scored {
        let at = rows
            .binary_search(&row)
            .expect("every scored row was projected");
        out[i] += logsoftmax(&logits[at * v..(at + 1) * v], target as usize);
    }
}
