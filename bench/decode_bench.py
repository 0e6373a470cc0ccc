"""Decoding and scoring speed of `glassbox sample` / `glassbox score` against `transformers`.

Trains a bench config for its few steps (a snapshot at the end), exports it with
`glassbox export --format hf`, then alternates, round by round on the same machine:

- greedy decoding of the same prompt: `glassbox sample --temperature 0` (its own timing of
  the generation, snapshot loading excluded) against `model.generate(do_sample=False)` on the
  exported model (the call timed alone, the model already loaded), both on the same number of
  threads; tokens/s over the new tokens, and time to the first token (glassbox reports it;
  for transformers a `max_new_tokens=1` call). The tokens must be equal (greedy parity).
- scoring: `glassbox score` tokens/s (wall, including loading) against the training forward's
  tokens/s (`throughput/tokens_per_second` of the run), both reported, their ratio too.

Usage (the release binary, the virtualenv `cargo xtask env` makes for the export test):
    cargo build --release
    target/xtask/venv-hf/bin/python bench/decode_bench.py --config default --threads 2
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(args, **kw):
    out = subprocess.run(args, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="default")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--glassbox", default=os.path.join(ROOT, "target/release/glassbox"))
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(a.threads)
    work = tempfile.mkdtemp(prefix="decode-bench-")
    lab = os.path.join(work, "lab")
    spec = open(os.path.join(ROOT, "bench/configs", a.config + ".toml")).read()
    steps = int(spec.split("[train]")[1].split("steps = ")[1].split("\n")[0])
    spec = spec.replace("[train]\n", f"[train]\ncheckpoint_interval = {steps}\n", 1)
    spec_path = os.path.join(work, "spec.toml")
    open(spec_path, "w").write(spec)
    env = dict(os.environ, GLASSBOX_PEAK_GFLOPS="100")
    sh([a.glassbox, "run", spec_path, "--lab", lab, "--threads", str(a.threads)], env=env, cwd=work)
    run = "run-000001"
    hf = os.path.join(work, "hf")
    sh([a.glassbox, "export", run, hf, "--format", "hf", "--lab", lab])
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    model.eval()

    # A prompt from the training distribution: the Markov source's bytes.
    prompt_ids = [1, 5, 9, 2, 7, 3, 3, 8, 0, 4, 6, 2, 1, 9, 5, 7]
    prompt_file = os.path.join(work, "prompt.bin")
    open(prompt_file, "wb").write(bytes(prompt_ids))
    text_file = os.path.join(work, "text.txt")
    seq_len = int(spec.split("seq_len = ")[1].split("\n")[0])
    open(text_file, "w").write(("the quick brown fox jumps over the lazy dog " * 400)[: 16 * seq_len])

    ours, theirs, ours_ttft, theirs_ttft, score_tps = [], [], [], [], []
    parity = True
    x = torch.tensor([prompt_ids])
    mask = torch.ones_like(x)
    with torch.no_grad():
        model.generate(x, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    for r in range(a.rounds):
        out = json.loads(sh([a.glassbox, "sample", run, "--prompt-file", prompt_file,
                             "--max-tokens", str(a.new_tokens), "--temperature", "0",
                             "--threads", str(a.threads), "--json", "--lab", lab]))
        c = out["completion"]
        ours.append(len(c["ids"]) / c["seconds"])
        ours_ttft.append(c["time_to_first_token"])
        with torch.no_grad():
            t = time.perf_counter()
            g = model.generate(x, attention_mask=mask, max_new_tokens=a.new_tokens,
                               do_sample=False, pad_token_id=0)
            theirs.append(a.new_tokens / (time.perf_counter() - t))
            t = time.perf_counter()
            model.generate(x, attention_mask=mask, max_new_tokens=1, do_sample=False, pad_token_id=0)
            theirs_ttft.append(time.perf_counter() - t)
        parity &= g[0, len(prompt_ids):].tolist() == c["ids"]
        t = time.perf_counter()
        s = json.loads(sh([a.glassbox, "score", run, "--text", text_file, "--threads",
                           str(a.threads), "--json", "--lab", lab]))
        score_tps.append(s["score"]["tokens"] / (time.perf_counter() - t))
        print(f"round {r + 1}: glassbox {ours[-1]:.1f} tok/s, transformers {theirs[-1]:.1f} tok/s, "
              f"score {score_tps[-1]:.0f} tok/s", flush=True)
    med = statistics.median
    train_tps = None
    summary = os.path.join(work, "runs", "bench-" + a.config, "summary.json")
    if os.path.exists(summary):
        train_tps = json.load(open(summary))["outcome"]["final_metrics"].get(
            "throughput/tokens_per_second")
    print(json.dumps({
        "config": a.config, "threads": a.threads, "rounds": a.rounds,
        "new_tokens": a.new_tokens,
        "glassbox_decode_tokens_per_s": med(ours),
        "transformers_decode_tokens_per_s": med(theirs),
        "decode_ratio": med(ours) / med(theirs),
        "glassbox_ttft_s": med(ours_ttft), "transformers_ttft_s": med(theirs_ttft),
        "greedy_tokens_equal": parity,
        "score_tokens_per_s_wall": med(score_tps),
        "training_tokens_per_s": train_tps,
    }, indent=2))


if __name__ == "__main__":
    main()
