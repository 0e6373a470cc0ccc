"""PyTorch eager twin of the glassbox runner's MoE model and training step, for the GPU
benchmark of issues 5 and 24 (glassbox CUDA tokens/s vs PyTorch eager on the same GPU, run by
scripts/gpu-check.sh in the same script).

Same model and step as bench/moe_jax.py (and runner/src/model.rs): token embedding, per layer
RMSNorm -> causal MHA with RoPE (pairs (i, i + D/2)) -> residual -> RMSNorm -> MoE (router
linear, softmax scores, top-k on scores + a no-grad bias, combine weights = chosen scores
renormalised, dropless dispatch by a stable sort by expert, one matmul per expert over its
contiguous rows, each token's k slots summed) + shared experts -> residual, final RMSNorm,
untied lm_head, cross-entropy; AdamW (no decay on norm gains), global-norm clip 1.0,
aux-loss-free bias update. Eager mode, no torch.compile, no fused/flash attention: the
explicit T x T softmax like the runner's materialized path. Not a training script: it
measures tokens/s only.

Precision, as the runner's `precision`: float32 is true f32 (TF32 off, like the runner's
pedantic cuBLAS math); bfloat16 is the usual eager mixed precision, as the runner's bf16 runs:
f32 parameters and optimiser state, the forward under torch.autocast(bfloat16) (matmuls on
bf16 operands with f32 accumulation), the loss in f32.

Usage: python3 bench/moe_torch.py CONFIG.toml [STEPS] [--dtype float32|bfloat16]
  -> prints one JSON line. Needs a CUDA GPU.
"""

import argparse

import json
import sys
import time
import tomllib

import torch
import torch.nn.functional as Fn


def load(path):
    with open(path, "rb") as f:
        s = tomllib.load(f)
    m, moe, t = s["model"], s["model"]["moe"], s["train"]
    return dict(
        V=256, C=m["d_model"], L=m["n_layers"], H=m["n_heads"], T=m["seq_len"],
        E=moe["n_experts"], K=moe["top_k"], F=moe["d_expert"], S=moe.get("n_shared", 0),
        B=t["batch_size"], lr=t["lr"],
    )


def init(cfg, dev, dtype):
    C, E, F, S, V, L = cfg["C"], cfg["E"], cfg["F"], cfg["S"], cfg["V"], cfg["L"]
    g = torch.Generator(device="cpu").manual_seed(0)
    out_std = 0.02 / (2 * L) ** 0.5

    def n(*shape, std=0.02):
        return (torch.randn(*shape, generator=g) * std).to(dev, dtype).requires_grad_()

    def ones(c):
        return torch.ones(c, device=dev, dtype=dtype, requires_grad=True)

    layers = []
    for _ in range(L):
        layers.append(dict(
            ln1=ones(C), wqkv=n(3 * C, C), wo=n(C, C, std=out_std), ln2=ones(C),
            router=n(E, C), w13=n(E, 2 * F, C), w2=n(E, C, F, std=out_std),
            ws13=n(max(S, 1), 2 * F, C), ws2=n(max(S, 1), C, F, std=out_std),
        ))
    return dict(wte=n(V, C), layers=layers, lnf=ones(C), lm_head=n(V, C))


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(torch.mean(x * x, -1, keepdim=True) + eps) * w


def rope(x, cos, sin):  # x [B, H, T, D]
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def swiglu(h, F):
    return Fn.silu(h[..., :F]) * h[..., F:]


def moe(p, x, bias, cfg):  # x [N, C]
    N, E, K, F = x.shape[0], cfg["E"], cfg["K"], cfg["F"]
    scores = torch.softmax(x @ p["router"].T, -1)
    _, idx = torch.topk(scores + bias, K, -1)  # bias carries no gradient
    w = torch.gather(scores, -1, idx)
    w = w / w.sum(-1, keepdim=True)
    flat = idx.reshape(-1)  # assignment a = n*K + j
    order = torch.sort(flat, stable=True).indices
    counts = torch.bincount(flat, minlength=E)
    xs = x[order // K]
    ys = []
    start = 0
    for e, c in enumerate(counts.tolist()):  # eager: one matmul pair per expert
        if c:
            h = xs[start:start + c] @ p["w13"][e].T
            ys.append(swiglu(h, F) @ p["w2"][e].T)
        start += c
    y = torch.cat(ys, 0)
    y_assign = torch.empty_like(y).index_copy(0, order, y).reshape(N, K, -1)
    out = (y_assign * w[..., None]).sum(1)
    for s in range(cfg["S"]):
        out = out + swiglu(x @ p["ws13"][s].T, F) @ p["ws2"][s].T
    return out, counts


def forward(params, bias, tokens, cfg, cos, sin, mask):
    B, T, C, H = cfg["B"], cfg["T"], cfg["C"], cfg["H"]
    D = C // H
    x = params["wte"][tokens].reshape(B * T, C)
    loads = []
    for li, p in enumerate(params["layers"]):
        a = rmsnorm(x, p["ln1"])
        qkv = (a @ p["wqkv"].T).reshape(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = rope(qkv[0], cos, sin), rope(qkv[1], cos, sin), qkv[2]
        s = (q @ k.transpose(-1, -2)) / D ** 0.5
        pr = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
        y = (pr @ v).permute(0, 2, 1, 3).reshape(B * T, C)
        x = x + y @ p["wo"].T
        m, load = moe(p, rmsnorm(x, p["ln2"]), bias[li], cfg)
        x = x + m
        loads.append(load)
    logits = rmsnorm(x, params["lnf"]) @ params["lm_head"].T
    return logits, torch.stack(loads)


def main():
    ap = argparse.ArgumentParser(description="PyTorch eager twin of the glassbox MoE step")
    ap.add_argument("config")
    ap.add_argument("steps", nargs="?", type=int, default=6)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    a = ap.parse_args()
    cfg = load(a.config)
    steps = a.steps
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False  # true f32, like the runner
    torch.backends.cudnn.allow_tf32 = False
    autocast_dtype = torch.bfloat16 if a.dtype == "bfloat16" else None
    dtype = torch.float32  # parameters and optimiser state stay f32 in both modes
    params = init(cfg, dev, dtype)
    leaves = [params["wte"], params["lnf"], params["lm_head"]]
    no_decay = {id(params["lnf"])}
    for p in params["layers"]:
        leaves += list(p.values())
        no_decay |= {id(p["ln1"]), id(p["ln2"])}
    decay = [x for x in leaves if id(x) not in no_decay]
    nd = [x for x in leaves if id(x) in no_decay]
    opt = torch.optim.AdamW(
        [dict(params=decay, weight_decay=0.1), dict(params=nd, weight_decay=0.0)],
        lr=cfg["lr"], betas=(0.9, 0.95), eps=1e-8, foreach=False, fused=False,
    )
    B, T, C, H = cfg["B"], cfg["T"], cfg["C"], cfg["H"]
    D = C // H
    inv = 10000.0 ** (-2.0 * torch.arange(D // 2, device=dev) / D)
    ang = torch.arange(T, device=dev)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=dev))
    bias = torch.zeros(cfg["L"], cfg["E"], device=dev, dtype=dtype)
    g = torch.Generator(device="cpu").manual_seed(1)
    data = torch.randint(0, 32, (steps + 2, B, T + 1), generator=g).to(dev)

    def step(i):
        nonlocal bias
        tokens, targets = data[i, :, :T], data[i, :, 1:]
        with torch.autocast("cuda", dtype=autocast_dtype or torch.float32,
                            enabled=autocast_dtype is not None):
            logits, loads = forward(params, bias, tokens, cfg, cos, sin, mask)
        loss = Fn.cross_entropy(logits.float(), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(leaves, 1.0)
        opt.step()
        with torch.no_grad():
            lf = loads.to(bias.dtype)
            bias = bias + 1e-3 * torch.sign(lf.mean(-1, keepdim=True) - lf)
            bias = bias - bias.mean(-1, keepdim=True)
        return loss

    step(0)  # warm-up (allocator, cuBLAS heuristics)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(1, steps + 1):
        loss = step(i)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps(dict(
        impl="pytorch-eager", config=a.config, torch=torch.__version__,
        dtype=a.dtype, device=torch.cuda.get_device_name(),
        steps=steps, tokens_per_second=steps * B * T / dt, seconds_per_step=dt / steps,
        final_loss=float(loss), peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30,
    )))


if __name__ == "__main__":
    main()
