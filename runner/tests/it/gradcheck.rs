//! Gradient checks: every op's backward kernel and the whole model's backward against central
//! finite differences, in f64 on small shapes (the CPU kernels are generic over the float type,
//! so these run the very code that trains, only wider).
//!
//! Each op check projects the op's output onto a fixed random tensor `R` (`L = sum(out * R)`),
//! feeds `R` as the upstream gradient, and compares the backward's input gradients with
//! `(L(x + h e_i) - L(x - h e_i)) / 2h`. With `h = 1e-5` in f64 the truncation error is
//! `O(h^2) ~ 1e-10` relative and the cancellation error `~ 1e-16 / 1e-5 = 1e-11`, so a
//! tolerance of `1e-6` relative (plus `1e-8` absolute for near-zero entries) leaves four orders
//! of margin while any wrong term (a missing factor, a transposed index) is off by O(1).

use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::backend::{
    Accumulate, AttnDims, Backend, Groups, Qkv, RmsNormSaved, RopeTables, ScoreKind, WeightLayout,
};
use glassbox_runner::model::{BatchIds, Model, ModelDims};
use glassbox_runner::rng::SplitMix64;

type Be = CpuBackend<f64>;

const H: f64 = 1e-5;
const RTOL: f64 = 1e-6;
const ATOL: f64 = 1e-8;

fn be() -> Be {
    CpuBackend::new(2).expect("thread pool")
}

fn randn(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| r.normal() * scale).collect()
}

/// Compare `analytic` with central differences of `loss` at `x`, on every element.
fn check(what: &str, x: &[f64], analytic: &[f64], loss: impl Fn(&[f64]) -> f64) {
    assert_eq!(x.len(), analytic.len(), "{what}: gradient length");
    let mut xp = x.to_vec();
    let mut worst = 0.0f64;
    for i in 0..x.len() {
        xp[i] = x[i] + H;
        let lp = loss(&xp);
        xp[i] = x[i] - H;
        let lm = loss(&xp);
        xp[i] = x[i];
        let num = (lp - lm) / (2.0 * H);
        let err = (num - analytic[i]).abs();
        let bound = ATOL + RTOL * num.abs().max(analytic[i].abs());
        assert!(
            err <= bound,
            "{what}[{i}]: finite difference {num:.12e} vs backward {:.12e}",
            analytic[i]
        );
        worst = worst.max(err);
    }
    // The analytic gradient must not be trivially zero (that would pass vacuously).
    assert!(
        analytic.iter().any(|g| g.abs() > 1e-6),
        "{what}: gradient is all zeros"
    );
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn rmsnorm_backward_matches_finite_differences() {
    let b = be();
    let (n, c) = (3, 8);
    let x = randn(n * c, 1, 1.0);
    let w = randn(c, 2, 1.0);
    let r = randn(n * c, 3, 1.0);
    let fwd = |x: &[f64], w: &[f64]| {
        let (mut o, mut rs) = (vec![0.0; n * c], vec![0.0; n]);
        b.rmsnorm_fwd(&mut o, &mut rs, &x.to_vec(), &w.to_vec(), c, 1e-5);
        (o, rs)
    };
    let (_, rstd) = fwd(&x, &w);
    let (mut dx, mut dw) = (vec![0.0; n * c], vec![0.0; c]);
    let saved = RmsNormSaved {
        x: &x,
        w: &w,
        rstd: &rstd,
    };
    b.rmsnorm_bwd(&mut dx, &mut dw, &r, saved, c);
    check("rmsnorm dx", &x, &dx, |x| dot(&fwd(x, &w).0, &r));
    check("rmsnorm dw", &w, &dw, |w| dot(&fwd(&x, w).0, &r));
}

#[test]
fn grouped_linear_backward_matches_finite_differences() {
    let b = be();
    // Three groups (one empty) over 5 rows, weights [4, out=3, in=4], starting at group 1.
    let g = Groups {
        rows: vec![2, 0, 3],
        first: 1,
        in_dim: 4,
        out_dim: 3,
        layout: WeightLayout::OutIn,
    };
    let x = randn(5 * 4, 4, 1.0);
    let w = randn(4 * 3 * 4, 5, 1.0);
    let r = randn(5 * 3, 6, 1.0);
    let fwd = |x: &[f64], w: &[f64]| {
        let mut o = vec![0.0; 5 * 3];
        b.linear_fwd(&mut o, &x.to_vec(), &w.to_vec(), &g);
        dot(&o, &r)
    };
    let mut dx = vec![0.0; 5 * 4];
    b.linear_bwd_data(&mut dx, &r, &w, &g, Accumulate::Overwrite);
    let mut dw = vec![0.0; w.len()];
    b.linear_bwd_weight(&mut dw, &r, &x, &g);
    check("linear dx", &x, &dx, |x| fwd(x, &w));
    // Weight 0 and 3's unused rows must get exactly zero; check() covers that too since the
    // finite difference there is exactly 0.
    check("linear dw", &w, &dw, |w| fwd(&x, w));
}

/// Attention over more positions than one causal block
/// (`glassbox_runner::backend::cpu::attention::QB`), so that the blocked products (each block
/// stopping at its diagonal, the transposed ones starting at it) are all exercised, including a
/// short last block.
#[test]
fn attention_over_several_causal_blocks_backward_matches_finite_differences() {
    use glassbox_runner::backend::cpu::attention::QB;
    let b = be();
    let dims = AttnDims {
        b: 1,
        t: 2 * QB + 3,
        h: 1,
        d: 4,
    };
    let len = dims.b * dims.h * dims.t * dims.d;
    let (q, k, v) = (
        randn(len, 21, 1.0),
        randn(len, 22, 1.0),
        randn(len, 23, 1.0),
    );
    let r = randn(len, 24, 1.0);
    let fwd = |q: &[f64], k: &[f64], v: &[f64]| {
        let mut y = vec![0.0; len];
        let mut p = vec![0.0; dims.b * dims.h * dims.t * dims.t];
        let heads = Qkv {
            q: &q.to_vec(),
            k: &k.to_vec(),
            v: &v.to_vec(),
        };
        b.attention_fwd(&mut y, &mut p, heads, dims);
        (y, p)
    };
    let (_, p) = fwd(&q, &k, &v);
    let mut d = Qkv {
        q: vec![0.0; len],
        k: vec![0.0; len],
        v: vec![0.0; len],
    };
    b.attention_bwd(
        d.each_mut(),
        &r,
        &p,
        Qkv {
            q: &q,
            k: &k,
            v: &v,
        },
        dims,
    );
    check("attention dq", &q, &d.q, |x| dot(&fwd(x, &k, &v).0, &r));
    check("attention dk", &k, &d.k, |x| dot(&fwd(&q, x, &v).0, &r));
    check("attention dv", &v, &d.v, |x| dot(&fwd(&q, &k, x).0, &r));
}

#[test]
fn attention_with_rope_backward_matches_finite_differences() {
    let b = be();
    let dims = AttnDims {
        b: 2,
        t: 5,
        h: 2,
        d: 4,
    };
    let (n, c) = (dims.b * dims.t, dims.h * dims.d);
    // Build RoPE tables like the model does, for T = 5, D = 4.
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in 0..dims.t {
        for i in 0..dims.d / 2 {
            let a = p as f64 * 10000f64.powf(-2.0 * i as f64 / dims.d as f64);
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    let qkv = randn(n * 3 * c, 7, 1.0);
    let r = randn(n * c, 8, 1.0);
    let rope = RopeTables {
        cos: &cos,
        sin: &sin,
    };
    let zeros = || vec![0.0; n * c];
    let fwd = |qkv: &[f64]| {
        let mut heads = Qkv {
            q: zeros(),
            k: zeros(),
            v: zeros(),
        };
        b.qkv_rope_fwd(heads.each_mut(), &qkv.to_vec(), rope, dims);
        let mut y = vec![0.0; n * c];
        let mut p = vec![0.0; dims.b * dims.h * dims.t * dims.t];
        b.attention_fwd(&mut y, &mut p, heads.each_ref(), dims);
        let mut m = vec![0.0; n * c];
        b.merge_heads_fwd(&mut m, &y, dims);
        (m, p, heads)
    };
    let (_, p, heads) = fwd(&qkv);
    let mut dy = vec![0.0; n * c];
    b.merge_heads_bwd(&mut dy, &r, dims);
    let mut dheads = Qkv {
        q: zeros(),
        k: zeros(),
        v: zeros(),
    };
    b.attention_bwd(dheads.each_mut(), &dy, &p, heads.each_ref(), dims);
    let mut dqkv = vec![0.0; n * 3 * c];
    b.qkv_rope_bwd(&mut dqkv, dheads.each_ref(), rope, dims);
    check("attention dqkv", &qkv, &dqkv, |x| dot(&fwd(x).0, &r));
    // Causality: the output at position 0 must not depend on later positions.
    let (m0, ..) = fwd(&qkv);
    let mut later = qkv.clone();
    for x in later[3 * c..].iter_mut() {
        *x += 1.0;
    }
    let (m1, ..) = fwd(&later);
    assert_eq!(m0[..c], m1[..c], "position 0 of batch 0 saw the future");
}

#[test]
fn swiglu_backward_matches_finite_differences() {
    let b = be();
    let (rows, f) = (3, 5);
    let h = randn(rows * 2 * f, 9, 1.5);
    let r = randn(rows * f, 10, 1.0);
    let fwd = |h: &[f64]| {
        let mut o = vec![0.0; rows * f];
        b.swiglu_fwd(&mut o, &h.to_vec(), f);
        dot(&o, &r)
    };
    let mut dh = vec![0.0; h.len()];
    b.swiglu_bwd(&mut dh, &r, &h, f);
    check("swiglu dh", &h, &dh, fwd);
}

#[test]
fn router_scores_and_z_loss_backward_match_finite_differences() {
    let b = be();
    let (n, e) = (4, 5);
    let logits = randn(n * e, 11, 1.0);
    let r = randn(n * e, 12, 1.0);
    for kind in [ScoreKind::Softmax, ScoreKind::Sigmoid] {
        let fwd = |l: &[f64]| {
            let mut s = vec![0.0; n * e];
            b.router_scores_fwd(&mut s, &l.to_vec(), e, kind);
            dot(&s, &r)
        };
        let mut s = vec![0.0; n * e];
        b.router_scores_fwd(&mut s, &logits, e, kind);
        let mut dl = vec![0.0; n * e];
        b.router_scores_bwd(&mut dl, &r, &s, e, kind);
        check(&format!("{kind:?} scores"), &logits, &dl, fwd);
    }
    let coef = 0.3;
    let mut dl = vec![0.0; n * e];
    b.router_z_loss(Some(&mut dl), &logits, e, coef);
    check("router z-loss", &logits, &dl, |l| {
        coef * b.router_z_loss(None, &l.to_vec(), e, 0.0)
    });
}

/// `(1 + e) x + x^2` per slot, `e` the slot's expert (rows of width `xs.len() / slots`).
fn expert_fn(xs: &[f64], slot_assignment: &[u32], token_expert: &[u32]) -> Vec<f64> {
    let c = xs.len() / slot_assignment.len();
    xs.iter()
        .enumerate()
        .map(|(i, v)| {
            let ex = token_expert[slot_assignment[i / c] as usize] as f64;
            (1.0 + ex) * v + v * v
        })
        .collect()
}

#[test]
fn routing_combine_dispatch_backward_match_finite_differences() {
    let b = be();
    let (n, e, k, c) = (6, 4, 2, 3);
    let scores = {
        let mut s = vec![0.0; n * e];
        b.router_scores_fwd(&mut s, &randn(n * e, 13, 1.0), e, ScoreKind::Softmax);
        s
    };
    let bias = vec![0.05, -0.02, 0.0, 0.01];
    let x = randn(n * c, 14, 1.0);
    let r = randn(n * c, 15, 1.0);
    let scale = 1.7;
    // Expert "computation": y = (1 + e) xs + xs^2 for the slot's expert e: non-linear, and
    // different per expert (with identical experts the renormalised weights' gradient
    // cancels exactly, since the K weights always sum to `scale`).
    let routing = b.route(&scores, &bias, k, scale, None);
    let s_rows: usize = routing.expert_rows.iter().sum();
    assert_eq!(s_rows, n * k, "dropless dispatch keeps every assignment");
    let loss = |s: &[f64], x: &[f64]| {
        // Routing (the discrete choice) is held fixed: the finite difference moves the scores
        // by 1e-5, far below the gap between chosen and unchosen biased scores here.
        let rt = b.route(&s.to_vec(), &bias, k, scale, None);
        assert_eq!(
            rt.token_expert, routing.token_expert,
            "choice flipped under h"
        );
        let mut xs = vec![0.0; s_rows * c];
        b.dispatch_fwd(&mut xs, &x.to_vec(), &rt, c);
        let y = expert_fn(&xs, &rt.slot_assignment, &rt.token_expert);
        let mut out = vec![0.0; n * c];
        b.combine_fwd(&mut out, &y, &rt, c, Accumulate::Overwrite);
        dot(&out, &r)
    };
    let mut xs = vec![0.0; s_rows * c];
    b.dispatch_fwd(&mut xs, &x, &routing, c);
    let y = expert_fn(&xs, &routing.slot_assignment, &routing.token_expert);
    let mut dy = vec![0.0; s_rows * c];
    let mut dw = vec![0.0; n * k];
    b.combine_bwd(&mut dy, &mut dw, &r, &y, &routing, c);
    let dxs: Vec<f64> = (0..s_rows * c)
        .map(|i| {
            let ex = routing.token_expert[routing.slot_assignment[i / c] as usize] as f64;
            dy[i] * (1.0 + ex + 2.0 * xs[i])
        })
        .collect();
    let mut dx = vec![0.0; n * c];
    b.dispatch_bwd(&mut dx, &dxs, &routing, c);
    let mut ds = vec![0.0; n * e];
    b.route_weights_bwd(&mut ds, &dw, &scores, &routing, scale);
    check("dispatch/combine dx", &x, &dx, |x| loss(&scores, x));
    check("combine weights dscores", &scores, &ds, |s| loss(s, &x));
}

#[test]
fn capacity_drops_assignments_in_token_order() {
    let b = be();
    // Every token prefers expert 0 then 1; capacity 2 keeps tokens 0 and 1 on each expert.
    let (n, k) = (4, 2);
    let scores: Vec<f64> = (0..n).flat_map(|_| [0.6, 0.3, 0.1]).collect();
    let rt = b.route(&scores, &[0.0; 3], k, 1.0, Some(2));
    assert_eq!(rt.expert_load, vec![4, 4, 0]);
    assert_eq!(rt.expert_rows, vec![2, 2, 0]);
    assert_eq!(rt.dropped, 4);
    // Slots 0,1 = expert 0 (tokens 0, 1, choice 0); slots 2,3 = expert 1 (choice 1).
    assert_eq!(rt.slot_assignment, vec![0, 2, 1, 3]);
    assert_eq!(rt.token_slot[4..], [u32::MAX, u32::MAX, u32::MAX, u32::MAX]);
    // Weights renormalised over the two choices: 0.6/0.9 and 0.3/0.9.
    assert!((rt.weights[0] - 2.0 / 3.0).abs() < 1e-12);
    assert!((rt.weights[1] - 1.0 / 3.0).abs() < 1e-12);
    // A bias moves the choice without changing the weights' source (the unbiased scores).
    let rt = b.route(&scores, &[0.0, 0.0, 0.6], k, 1.0, None);
    assert_eq!(rt.token_expert[..2], [2, 0]);
    assert!((rt.weights[0] - 0.1 / 0.7).abs() < 1e-12);
}

#[test]
fn cross_entropy_with_z_loss_backward_matches_finite_differences() {
    let b = be();
    let (n, v) = (3, 7);
    let logits = randn(n * v, 16, 2.0);
    let targets = vec![0u32, 6, 3];
    let z = 0.1;
    let loss = |l: &[f64]| {
        let s = b.cross_entropy(&mut l.to_vec(), &targets, v, z, None);
        (s.cross_entropy + z * s.z) / n as f64
    };
    let mut g = logits.clone();
    b.cross_entropy(&mut g, &targets, v, z, Some(1.0 / n as f64));
    check("cross-entropy + z dlogits", &logits, &g, loss);
}

#[test]
fn embedding_backward_sums_repeated_tokens() {
    let b = be();
    let (v, c) = (5, 3);
    let wte = randn(v * c, 17, 1.0);
    let tokens = vec![1u32, 3, 1, 0];
    let r = randn(tokens.len() * c, 18, 1.0);
    let fwd = |w: &[f64]| {
        let mut o = vec![0.0; tokens.len() * c];
        b.embedding_fwd(&mut o, &w.to_vec(), &tokens, c);
        dot(&o, &r)
    };
    let mut dw = vec![0.0; v * c];
    b.embedding_bwd(&mut dw, &r, &tokens, c);
    check("embedding dwte", &wte, &dw, fwd);
}

fn tiny_dims() -> ModelDims {
    ModelDims {
        vocab: 11,
        d_model: 8,
        n_layers: 2,
        n_heads: 2,
        seq_len: 4,
        n_experts: 4,
        top_k: 2,
        d_expert: 6,
        n_shared: 1,
        rope_theta: 10_000.0,
        norm_eps: 1e-5,
        score: ScoreKind::Softmax,
        combine_scale: 1.3,
        capacity_factor: None,
        router_z_loss: 0.01,
        z_loss: 1e-3,
        switch_coef: Some(0.05),
    }
}

/// The whole model: every parameter of every tensor (about 1.4k of them), all loss terms on.
fn whole_model_check(dims: ModelDims) {
    let b = be();
    let model = Model::new(dims);
    let bsz = 2;
    let n = bsz * model.dims.seq_len;
    // Larger-than-trained init (std 0.3 instead of 0.02) so every path carries signal.
    let mut params: Vec<Vec<f64>> = model.init_params(&b, 5);
    for (i, p) in params.iter_mut().enumerate() {
        if model.params[i].init_std.is_some() {
            for x in p.iter_mut() {
                *x *= 15.0;
            }
        }
    }
    let mut r = SplitMix64::new(3);
    let tokens: Vec<u32> = (0..n)
        .map(|_| r.below(model.dims.vocab as u64) as u32)
        .collect();
    let targets: Vec<u32> = (0..n)
        .map(|_| r.below(model.dims.vocab as u64) as u32)
        .collect();
    let bias: Vec<Vec<f64>> = (0..model.dims.n_layers)
        .map(|l| randn(model.dims.n_experts, 40 + l as u64, 0.01))
        .collect();
    let mut grads = model.zeros_like_params(&b);
    let ids = BatchIds {
        tokens: &tokens,
        targets: &targets,
        batch_size: bsz,
    };
    let stats = model.forward_backward(&b, &params, &mut grads, &bias, &ids);
    assert!(stats.total().is_finite());
    for ti in 0..params.len() {
        let name = model.params[ti].name.clone();
        if params[ti].is_empty() {
            continue;
        }
        let x = params[ti].clone();
        check(&name, &x, &grads[ti], |xp| {
            let mut p2 = params.clone();
            p2[ti] = xp.to_vec();
            model.evaluate(&b, &p2, &bias, &ids).total()
        });
        params[ti] = x;
    }
}

#[test]
fn whole_model_backward_matches_finite_differences_softmax_switch() {
    whole_model_check(tiny_dims());
}

#[test]
fn whole_model_backward_matches_finite_differences_sigmoid_capacity() {
    let mut d = tiny_dims();
    d.score = ScoreKind::Sigmoid;
    d.switch_coef = None;
    d.n_shared = 0;
    d.n_layers = 1;
    // Capacity 1.0 x the even share: some assignments are dropped, their slots vanish.
    d.capacity_factor = Some(1.0);
    whole_model_check(d);
}
