"""JAX twin of the glassbox runner's MoE model and training step, for the issue-4 speed check.

Same model as runner/src/model.rs: token embedding, per layer RMSNorm -> causal MHA with RoPE
(pairs (i, i + D/2)) -> residual -> RMSNorm -> MoE (router linear, softmax scores, top-k on
scores + a stop-gradient bias, combine weights = chosen scores renormalised, dropless dispatch
by a stable sort by expert, grouped SwiGLU expert matmuls, each token's k slots summed) +
shared experts -> residual, final RMSNorm, untied lm_head, cross-entropy.
Training step: AdamW (no decay on norm gains), global-norm clip 1.0, aux-loss-free bias update.
float32, jit-compiled, CPU. Not a training script: it measures tokens/s only.

Two expert dispatches (the third argument):
- `blocked` (default, the stronger peer): MegaBlocks-style in plain XLA. The sorted assignments
  are scattered into per-expert groups padded to 64-row blocks, each block's expert weights are
  gathered, and one batched matmul runs over all blocks, so the expert FLOPs are the routed
  rows' plus at most 63 padding rows per expert.
- `ragged`: `jax.lax.ragged_dot`, what the big run's stack calls. XLA's CPU backend lowers it to
  a masked dense dot over all experts (E times the expert FLOPs), so it is the weaker row.

Usage: python3 bench/moe_jax.py CONFIG.toml [STEPS] [blocked|ragged]   -> prints one JSON line.
Tested with jax 0.10.2 (`pip install 'jax[cpu]==0.10.2'`).
"""

import json
import sys
import time
import tomllib

import jax
import jax.numpy as jnp


def load(path):
    with open(path, "rb") as f:
        s = tomllib.load(f)
    m, moe, t = s["model"], s["model"]["moe"], s["train"]
    return dict(
        V=256, C=m["d_model"], L=m["n_layers"], H=m["n_heads"], T=m["seq_len"],
        E=moe["n_experts"], K=moe["top_k"], F=moe["d_expert"], S=moe.get("n_shared", 0),
        B=t["batch_size"], lr=t["lr"],
    )


def init(cfg, key):
    C, E, F, S, V, L = cfg["C"], cfg["E"], cfg["F"], cfg["S"], cfg["V"], cfg["L"]
    ks = iter(jax.random.split(key, 8 * L + 4))
    n = lambda shape, std=0.02: std * jax.random.normal(next(ks), shape, jnp.float32)
    out_std = 0.02 / (2 * L) ** 0.5
    layers = []
    for _ in range(L):
        layers.append(dict(
            ln1=jnp.ones(C), wqkv=n((3 * C, C)), wo=n((C, C), out_std), ln2=jnp.ones(C),
            router=n((E, C)), w13=n((E, C, 2 * F)), w2=n((E, F, C), out_std),
            ws13=n((S, C, 2 * F)), ws2=n((S, F, C), out_std),
        ))
    return dict(wte=n((V, C)), layers=layers, lnf=jnp.ones(C), lm_head=n((V, C)))


def rmsnorm(x, w, eps=1e-5):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w


def rope(x, cos, sin):  # x [B, H, T, D]
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def swiglu(h, F):
    return jax.nn.silu(h[..., :F]) * h[..., F:]


BLOCK = 64  # rows per expert block of the blocked dispatch


def experts_ragged(p, xs, group_sizes, cfg):  # xs [N*K, C] sorted by expert
    h = jax.lax.ragged_dot(xs, p["w13"], group_sizes)
    return jax.lax.ragged_dot(swiglu(h, cfg["F"]), p["w2"], group_sizes)


def experts_blocked(p, xs, flat_sorted, group_sizes, cfg):
    """Each expert's rows padded to BLOCK-row blocks; one batched matmul with per-block weights.

    Shapes are static for jit: at most A + E*(BLOCK-1) padded rows (A = N*K assignments),
    rounded up to whole blocks; blocks past the last group compute on zero rows and are dropped.
    """
    A, C = xs.shape
    E, F = cfg["E"], cfg["F"]
    nb = -(-(A + E * (BLOCK - 1)) // BLOCK)
    padded = (group_sizes + BLOCK - 1) // BLOCK * BLOCK
    pad_end = jnp.cumsum(padded)
    pad_start = pad_end - padded
    grp_start = jnp.cumsum(group_sizes) - group_sizes
    # sorted assignment s of expert e goes to padded row pad_start[e] + (s - grp_start[e])
    pos = pad_start[flat_sorted] + jnp.arange(A) - grp_start[flat_sorted]
    xp = jnp.zeros((nb * BLOCK, C), xs.dtype).at[pos].set(xs).reshape(nb, BLOCK, C)
    block_expert = jnp.minimum(
        jnp.searchsorted(pad_end, jnp.arange(nb) * BLOCK, side="right"), E - 1)
    h = jnp.einsum("bsc,bcf->bsf", xp, p["w13"][block_expert])
    y = jnp.einsum("bsf,bfc->bsc", swiglu(h, F), p["w2"][block_expert])
    return y.reshape(nb * BLOCK, C)[pos]


def moe(p, x, bias, cfg):  # x [N, C]
    N, E, K = x.shape[0], cfg["E"], cfg["K"]
    F = cfg["F"]
    scores = jax.nn.softmax(x @ p["router"].T, -1)
    _, idx = jax.lax.top_k(scores + jax.lax.stop_gradient(bias), K)  # [N, K]
    w = jnp.take_along_axis(scores, idx, -1)
    w = w / jnp.sum(w, -1, keepdims=True)
    flat = idx.reshape(-1)  # assignment a = n*K + j
    order = jnp.argsort(flat, stable=True)
    group_sizes = jnp.bincount(flat, length=E).astype(jnp.int32)
    xs = x[order // K]
    if cfg["dispatch"] == "ragged":
        y = experts_ragged(p, xs, group_sizes, cfg)
    else:
        y = experts_blocked(p, xs, flat[order], group_sizes, cfg)
    y_assign = jnp.zeros_like(y).at[order].set(y).reshape(N, K, -1)
    out = jnp.sum(y_assign * w[..., None], 1)
    for s in range(cfg["S"]):
        out = out + swiglu(x @ p["ws13"][s], F) @ p["ws2"][s]
    return out, group_sizes


def forward(params, bias, tokens, cfg):
    B, T, C, H = cfg["B"], cfg["T"], cfg["C"], cfg["H"]
    D = C // H
    inv = 10000.0 ** (-2.0 * jnp.arange(D // 2) / D)
    ang = jnp.arange(T)[:, None] * inv[None, :]
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    mask = jnp.tril(jnp.ones((T, T), bool))
    x = params["wte"][tokens].reshape(B * T, C)
    loads = []
    for li, p in enumerate(params["layers"]):
        a = rmsnorm(x, p["ln1"])
        qkv = (a @ p["wqkv"].T).reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)
        q, k, v = rope(qkv[0], cos, sin), rope(qkv[1], cos, sin), qkv[2]
        s = jnp.einsum("bhtd,bhsd->bhts", q, k) / D ** 0.5
        pr = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), -1)
        y = jnp.einsum("bhts,bhsd->bhtd", pr, v).transpose(0, 2, 1, 3).reshape(B * T, C)
        x = x + y @ p["wo"].T
        m, load = moe(p, rmsnorm(x, p["ln2"]), bias[li], cfg)
        x = x + m
        loads.append(load)
    logits = rmsnorm(x, params["lnf"]) @ params["lm_head"].T
    return logits, jnp.stack(loads)


def loss_fn(params, bias, tokens, targets, cfg):
    logits, loads = forward(params, bias, tokens, cfg)
    lse = jax.nn.logsumexp(logits, -1)
    ce = jnp.mean(lse - jnp.take_along_axis(logits, targets.reshape(-1, 1), -1)[:, 0])
    return ce, loads


def make_step(cfg):
    b1, b2, eps, wd, clip, rate = 0.9, 0.95, 1e-8, 0.1, 1.0, 1e-3

    @jax.jit
    def step(params, m, v, bias, t, tokens, targets):
        (loss, loads), g = jax.value_and_grad(loss_fn, has_aux=True)(params, bias, tokens, targets, cfg)
        gn = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(g)))
        scale = jnp.minimum(1.0, clip / (gn + 1e-12))
        lr = cfg["lr"]

        def upd(path, p, g, m, v):
            name = jax.tree_util.keystr(path)
            decay = 0.0 if any(k in name for k in ("'ln1'", "'ln2'", "'lnf'")) else wd
            g = g * scale
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
            return p - lr * (mh / (jnp.sqrt(vh) + eps) + decay * p), m, v

        out = jax.tree_util.tree_map_with_path(upd, params, g, m, v)
        is_t = lambda x: isinstance(x, tuple)
        params = jax.tree_util.tree_map(lambda o: o[0], out, is_leaf=is_t)
        m = jax.tree_util.tree_map(lambda o: o[1], out, is_leaf=is_t)
        v = jax.tree_util.tree_map(lambda o: o[2], out, is_leaf=is_t)
        mean = jnp.mean(loads.astype(jnp.float32), -1, keepdims=True)
        bias = bias + rate * jnp.sign(mean - loads)
        bias = bias - jnp.mean(bias, -1, keepdims=True)
        return params, m, v, bias, loss

    return step


def main():
    cfg = load(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    cfg["dispatch"] = sys.argv[3] if len(sys.argv) > 3 else "blocked"
    if cfg["dispatch"] not in ("blocked", "ragged"):
        sys.exit(f"dispatch {cfg['dispatch']!r}: expected blocked or ragged")
    key = jax.random.PRNGKey(0)
    params = init(cfg, key)
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    bias = jnp.zeros((cfg["L"], cfg["E"]))
    step = make_step(cfg)
    B, T = cfg["B"], cfg["T"]
    data = jax.random.randint(jax.random.PRNGKey(1), (steps + 1, B, T + 1), 0, 32)
    t0 = time.perf_counter()
    params, m, v, bias, loss = step(params, m, v, bias, 1, data[0, :, :T], data[0, :, 1:])
    loss.block_until_ready()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(1, steps + 1):
        params, m, v, bias, loss = step(params, m, v, bias, i + 1, data[i, :, :T], data[i, :, 1:])
    loss.block_until_ready()
    dt = time.perf_counter() - t0
    print(json.dumps(dict(
        impl="jax", dispatch=cfg["dispatch"], config=sys.argv[1], jax=jax.__version__, steps=steps,
        tokens_per_second=steps * B * T / dt, seconds_per_step=dt / steps,
        compile_seconds=compile_s, final_loss=float(loss),
    )))


if __name__ == "__main__":
    main()
