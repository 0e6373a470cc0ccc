"""`glassbox eval` on a multiple-choice suite against EleutherAI's lm-evaluation-harness.

What it is: trains a bench config (a snapshot at the end), exports it with
`glassbox export --format hf`, draws a multiple-choice suite from the config's Markov source
(`glassbox data eval-suite generate`), imports it, then alternates, round by round on the same
machine and thread count:

- `glassbox eval RUN --suite bench-choice --json`: its `seconds` (scoring alone, model and suite
  already loaded) and its metrics;
- lm-eval-harness on the exported model and the same JSONL (task `bench/lm_eval_task/`, written
  per run with the file's path, `target_delimiter: ""`), through its Python API in a fresh
  process: the model is loaded first (`HFLM`), then `simple_evaluate` is timed, and inside it
  the `loglikelihood` phase (tokenizing and every forward pass) alone; that phase is the
  counterpart of glassbox's `seconds`. Round 1 also runs the `lm_eval` command line as a user
  would (process wall time, model load included) and checks it agrees with the API.

A generated suite's choices are all 6 symbols long, so its acc_norm picks what acc picks and
never tests the normalisation; a hand-made "varied" suite (choices of 1 to 8 characters, a
third of the contexts ending in whitespace, some longer than the model's context) is imported
too and scored once by glassbox, lm-eval and the reference.

acc and acc_norm must agree as counts of items (a difference of one or two items is accepted
only where float32 rounding decides a near-tie, and is shown); a Markdown table gives items/s on
both sides, their ratio and the metrics.

`--check` scores a suite with a ~30-line pure-`transformers` reference (per-choice
log-likelihoods, lm-eval's request rules written out) and compares it, item by item, with
lm-eval's; `--self-test` does that on a tiny random exported-shape model it builds itself (the
twin class of `runner/src/hf.rs`, glassbox's bytes tokenizer) and a hand-made suite, no glassbox
binary needed.

lm-eval runs with `prefix_token_id=0` (see PREFIX) and `dtype=float32`; everything else is its
default (logits cache on, requests sorted longest first, right padding).

What it is not: a test (it measures one machine; a busy one makes torch's thread barriers
stall, which is warned about), a check of glassbox's per-item log-likelihoods (its JSON gives
the metrics only), or an lm-eval run on real benchmarks.

Usage (the release binary, the lm-eval virtualenv):
    python3 -m venv /work/lmeval-venv
    /work/lmeval-venv/bin/pip install "lm_eval[hf]==0.4.13" torch==2.15.0 transformers==5.24.0 \\
        tokenizers==0.23.2
    cargo build --release
    python3 bench/eval_bench.py --config default --items 10000 --threads 2 \\
        --python /work/lmeval-venv/bin/python
    python3 bench/eval_bench.py --self-test --python /work/lmeval-venv/bin/python
"""

import argparse
import glob
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK_TEMPLATE = os.path.join(ROOT, "bench", "lm_eval_task", "glassbox_choice.yaml")
TASK = "glassbox_choice"
DEFAULT_PYTHON = "/work/lmeval-venv/bin/python"
# lm-eval's batch size: the fastest fixed one measured (`--sweep`) on the 2-core dev machine,
# lm_eval 0.4.13, torch 2.15.0, the `default` config's export, 500 generated-shape items, 2
# threads, 3 interleaved rounds, median loglikelihood seconds: 64: 37.7, 128: 14.6, 256: 15.2,
# 512: 11.4, auto (probes max_batch_size=512, then 512): 23.7. The machine was busy (cargo);
# a quiet moment's forward alone gave ~680 sequences/s at 64 and at 512 alike (~100 at 1):
# CPU throughput saturates by 64 and a bigger batch only helps when cores are contended. auto
# is never faster on CPU: it runs a probe forward at the ceiling and, with no OOM to hit, picks
# the ceiling.
DEFAULT_BATCH = "512"
# lm-eval 0.4.13 cannot run a tokenizer with neither BOS nor EOS (glassbox's bytes tokenizer):
# HFLM.tok_encode (models/huggingface.py:1053) calls tokenizer.decode(self.prefix_token_id) on
# every string, and prefix_token_id (:611) is then None -> TypeError. Naming a prefix token
# avoids it and changes nothing else: the prefix only stands in for an empty context
# (api/model.py:455, which glassbox refuses for a bytes model too), and its has_bos_prefix test
# only turns add_special_tokens off for a tokenizer that adds none.
PREFIX = {"prefix_token_id": 0}


def sh(args, env=None, cwd=None):
    out = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout[-4000:]}\n{out.stderr[-8000:]}")
    return out.stdout


def thread_env(n):
    """The environment every torch process here runs in: n threads, nothing from the hub."""
    return dict(os.environ, OMP_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n),
                HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                HF_ALLOW_CODE_EVAL="0")


def write_task(suite, where):
    """The lm-eval task for `suite` (a JSONL path) in a new folder under `where`."""
    d = tempfile.mkdtemp(prefix="lm-eval-task-", dir=where)
    text = open(TASK_TEMPLATE).read().replace("__SUITE_JSONL__", json.dumps(os.path.abspath(suite)))
    open(os.path.join(d, TASK + ".yaml"), "w").write(text)
    return d


def worker(py, mode, args, n_threads):
    """Runs this file's `--worker MODE` under the lm-eval interpreter; its JSON answer."""
    out = sh([py, os.path.abspath(__file__), "--worker", mode, "--threads", str(n_threads)] + args,
             env=thread_env(n_threads))
    return json.loads(out.strip().splitlines()[-1])


def load_items(path):
    return [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]


# ---------------------------------------------------------------------------------------------
# Workers: run under the lm-eval virtualenv's interpreter (torch, transformers, lm_eval).


def w_lm_eval(a):
    """lm-eval's Python API: model loaded first, then simple_evaluate timed, its loglikelihood
    phase timed alone. Prints one JSON line (timings, metrics, per-item lls and picks)."""
    import torch
    torch.set_num_threads(a.threads)
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    bs = a.batch_size if a.batch_size.startswith("auto") else int(a.batch_size)
    t = time.perf_counter()
    lm = HFLM(pretrained=a.hf, dtype="float32", device="cpu", batch_size=bs,
              max_batch_size=a.max_batch_size, **PREFIX)
    load_s = time.perf_counter() - t
    phase = {"s": 0.0, "requests": 0, "lls": {}}
    inner = lm.loglikelihood

    def timed(requests, *args, **kw):
        t0 = time.perf_counter()
        res = inner(requests, *args, **kw)
        phase["s"] += time.perf_counter() - t0
        phase["requests"] += len(requests)
        for r, (ll, _) in zip(requests, res):
            phase["lls"][(r.doc_id, r.idx)] = ll
        return res

    lm.loglikelihood = timed
    tm = TaskManager(include_path=a.task_dir)
    t = time.perf_counter()
    out = simple_evaluate(model=lm, tasks=[TASK], task_manager=tm, log_samples=True,
                          bootstrap_iters=0 if a.no_stderr else 100000)
    eval_s = time.perf_counter() - t
    r = out["results"][TASK]
    samples = sorted(out["samples"][TASK], key=lambda s: s["doc_id"])
    n = len(samples)
    lls = [[phase["lls"][(s["doc_id"], j)] for j in range(len(s["doc"]["choices"]))]
           for s in samples]
    print(json.dumps({
        "load_s": load_s, "evaluate_s": eval_s, "loglikelihood_s": phase["s"],
        "requests": phase["requests"], "items": n, "batch_size": str(bs),
        "batch_sizes_detected": {str(k): v for k, v in getattr(lm, "batch_sizes", {}).items()},
        "max_length": lm.max_length, "torch_threads": torch.get_num_threads(),
        "metrics": {"acc": r["acc,none"], "acc_norm": r["acc_norm,none"],
                    "acc_stderr": r.get("acc_stderr,none"),
                    "acc_norm_stderr": r.get("acc_norm_stderr,none")},
        "acc_items": [int(s["acc"]) for s in samples],
        "acc_norm_items": [int(s["acc_norm"]) for s in samples],
        "lls": lls,
    }))


def w_reference(a):
    """The reference: per-choice log-likelihoods straight from transformers, lm-eval's request
    rules written out, acc/acc_norm/stderr as lm-eval defines them. Byte-level models only
    (a token is a byte: the tokenizer is not used, which checks it too)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(a.hf, dtype=torch.float32).eval()
    L = model.config.max_position_embeddings          # lm-eval's max_length (n_positions absent)
    acc, acc_norm, all_lls = [], [], []
    with torch.no_grad():
        for item in load_items(a.suite):
            ctx = item["context"]
            kept = ctx.rstrip()                        # trailing str.isspace() chars move to the choice
            seqs, conts = [], []
            for choice in item["choices"]:
                c = list(kept.encode())                # context tokens (a token is a byte)
                w = c + list((ctx[len(kept):] + choice).encode())
                conts.append(w[-(L + 1):][-(len(w) - len(c)):])   # continuation tokens
                seqs.append(w[-(L + 1):][:-1])         # left truncation, last token not fed
            T = max(map(len, seqs))
            x = torch.tensor([s + [0] * (T - len(s)) for s in seqs])   # right padding, causal
            logp = torch.log_softmax(model(x).logits, dim=-1)
            lls = []
            for i, (s, cont) in enumerate(zip(seqs, conts)):
                rows = logp[i, len(s) - len(cont):len(s)]   # position p predicts token p + 1
                lls.append(float(rows.gather(1, torch.tensor(cont)[:, None]).sum()))
            lens = np.array([float(len(ch)) for ch in item["choices"]])  # characters
            acc.append(int(np.argmax(lls) == item["answer"]))            # first max wins
            acc_norm.append(int(np.argmax(np.array(lls) / lens) == item["answer"]))
            all_lls.append(lls)

    def stderr(xs):                                    # sample stddev / sqrt(n)
        m = sum(xs) / len(xs)
        return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) / math.sqrt(len(xs))
    print(json.dumps({"metrics": {"acc": sum(acc) / len(acc), "acc_norm": sum(acc_norm) / len(acc),
                                  "acc_stderr": stderr(acc), "acc_norm_stderr": stderr(acc_norm)},
                      "acc_items": acc, "acc_norm_items": acc_norm, "lls": all_lls,
                      "max_length": L}))


def w_tiny_model(a):
    """A random model of the class glassbox exports a spec as (runner/src/hf.rs `config`), with
    glassbox's bytes tokenizer (runner/src/data/tokenizer.rs `bytes_json`) and the export's
    tokenizer_config/generation_config (lab/src/export.rs)."""
    import tomllib

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM
    spec = tomllib.load(open(a.spec, "rb"))
    m, moe = spec["model"], spec["model"]["moe"]
    seq_len = a.seq_len or m["seq_len"]
    hd = m["d_model"] // m["n_heads"]
    n_shared = moe.get("n_shared", 0)
    cfg = {
        "vocab_size": m.get("vocab", 256), "hidden_size": m["d_model"],
        "num_hidden_layers": m["n_layers"], "num_attention_heads": m["n_heads"],
        "num_key_value_heads": m["n_heads"], "head_dim": hd, "hidden_act": "silu",
        "max_position_embeddings": seq_len, "rms_norm_eps": m.get("norm_eps", 1e-5),
        "tie_word_embeddings": False, "use_cache": True, "bos_token_id": None,
        "eos_token_id": None, "pad_token_id": None, "dtype": "float32",
        "intermediate_size": moe["d_expert"] * max(n_shared, 1),
        "moe_intermediate_size": moe["d_expert"], "initializer_range": a.init_std,
    }
    theta = m.get("rope_theta", 10000.0)
    if (a.score or moe.get("score", "softmax")) == "sigmoid":
        model_type = "glm4_moe"
        cfg.update({"rope_parameters": {"rope_type": "default", "rope_theta": theta,
                                        "partial_rotary_factor": 1.0},
                    "partial_rotary_factor": 1.0, "rope_theta": theta, "attention_bias": False,
                    "use_qk_norm": False, "n_routed_experts": moe["n_experts"],
                    "num_experts_per_tok": moe["top_k"], "n_shared_experts": n_shared,
                    "norm_topk_prob": True, "routed_scaling_factor": moe.get("combine_scale", 1.0),
                    "n_group": 1, "topk_group": 1, "first_k_dense_replace": 0,
                    "num_nextn_predict_layers": 0})
    else:
        model_type = "ernie4_5_moe"
        cfg.update({"rope_parameters": {"rope_type": "default", "rope_theta": theta},
                    "rope_theta": theta, "use_bias": False, "moe_num_experts": moe["n_experts"],
                    "moe_k": moe["top_k"], "moe_num_shared_experts": n_shared,
                    "moe_layer_start_index": 0, "moe_layer_end_index": m["n_layers"] - 1,
                    "moe_layer_interval": 1, "moe_norm_min": 1e-12})
    torch.manual_seed(a.seed)
    config = AutoConfig.for_model(model_type, **cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():                              # peaked, untied: no near-uniform ties
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, a.init_std)
    model.save_pretrained(a.out)
    # The bytes tokenizer: GPT-2's byte symbols, token id = byte, no merges, no specials.
    printable = lambda b: 33 <= b <= 126 or 0xA1 <= b <= 0xAC or b >= 0xAE
    sym, rank = {}, 0
    for b in range(256):
        sym[b] = chr(b) if printable(b) else chr(256 + rank)
        rank += 0 if printable(b) else 1
    tok = Tokenizer(models.BPE(vocab={sym[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                 use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": seq_len,
               "eos_token": None, "clean_up_tokenization_spaces": False},
              open(os.path.join(a.out, "tokenizer_config.json"), "w"), indent=2)
    json.dump({"eos_token_id": None, "bos_token_id": None, "do_sample": False},
              open(os.path.join(a.out, "generation_config.json"), "w"), indent=2)
    print(json.dumps({"model_type": model_type, "out": a.out, "seq_len": seq_len}))


def w_tokenizer_check(a):
    """The exported tokenizer gives one token per UTF-8 byte, id = byte, for every context and
    choice in the suite (control characters included)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.hf)
    bad = 0
    for item in load_items(a.suite):
        for s in [item["context"]] + item["choices"]:
            bad += tok.encode(s, add_special_tokens=False) != list(s.encode())
            bad += tok.encode(s) != list(s.encode())
    print(json.dumps({"mismatches": bad, "bos": tok.bos_token_id, "eos": tok.eos_token_id}))


# ---------------------------------------------------------------------------------------------
# Driver (stdlib only).


def lm_eval_cli(a, hf, task_dir, work, batch):
    """`lm_eval` as a user runs it; process wall time and its metrics."""
    out_dir = tempfile.mkdtemp(prefix="lm-eval-out-", dir=work)
    cmd = [a.python, "-m", "lm_eval", "--model", "hf", "--model_args",
           f"pretrained={hf},dtype=float32,prefix_token_id={PREFIX['prefix_token_id']}", "--device", "cpu", "--tasks", TASK,
           "--include_path", task_dir, "--batch_size", str(batch), "--output_path", out_dir]
    t = time.perf_counter()
    sh(cmd, env=thread_env(a.threads))
    wall = time.perf_counter() - t
    files = sorted(glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True))
    if not files:
        sys.exit(f"lm_eval wrote no results under {out_dir}")
    res = json.load(open(files[-1]))
    r = res["results"][TASK]
    return {"wall_s": wall, "acc": r["acc,none"], "acc_norm": r["acc_norm,none"],
            "acc_stderr": r.get("acc_stderr,none"), "acc_norm_stderr": r.get("acc_norm_stderr,none"),
            "total_evaluation_time_seconds": float(res.get("total_evaluation_time_seconds", "nan"))}


def lm_eval_api(a, hf, task_dir, batch):
    return worker(a.python, "lm-eval", ["--hf", hf, "--task-dir", task_dir, "--batch-size",
                                        str(batch), "--max-batch-size", str(a.max_batch_size)],
                  a.threads)


def counts(metrics, n):
    return {k: round(metrics[k] * n) for k in ("acc", "acc_norm")}


def compare_items(ref, lme, n, allowed):
    """Item-level agreement of two scorings; a differing pick is excused only as a near-tie."""
    worst, ties, bad = 0.0, 0, []
    for i in range(n):
        d = max(abs(x - y) for x, y in zip(ref["lls"][i], lme["lls"][i]))
        worst = max(worst, d)
        for key in ("acc_items", "acc_norm_items"):
            if ref[key][i] != lme[key][i]:
                bad.append((i, key, ref["lls"][i], lme["lls"][i]))
    print(f"max |ll(reference) - ll(lm-eval)| over all choices: {worst:.3g} nats")
    for i, key, r, l in bad[:10]:
        print(f"  item {i} {key}: reference lls {r} lm-eval lls {l}")
    return len(bad) <= allowed, worst


def check(a, hf, suite, work):
    """Reference vs lm-eval on one model and suite; exits non-zero on disagreement."""
    items = load_items(suite)
    n = len(items)
    tc = worker(a.python, "tokenizer-check", ["--hf", hf, "--suite", suite], a.threads)
    print(f"tokenizer: {tc['mismatches']} strings whose tokens are not their bytes "
          f"(bos {tc['bos']}, eos {tc['eos']})")
    ref = worker(a.python, "reference", ["--hf", hf, "--suite", suite], a.threads)
    task_dir = write_task(suite, work)
    lme = lm_eval_api(a, hf, task_dir, a.lm_eval_batch_size)
    cli = lm_eval_cli(a, hf, task_dir, work, a.lm_eval_batch_size)
    print(f"\n| {n} items | acc | acc_norm | acc_stderr | acc_norm_stderr |\n|---|---|---|---|---|")
    for name, m in (("reference", ref["metrics"]), ("lm-eval API", lme["metrics"]),
                    ("lm-eval CLI", cli)):
        c = counts(m, n)
        se = lambda k: f"{m[k]:.6f}" if m.get(k) is not None else "-"
        print(f"| {name} | {c['acc']} ({m['acc']:.4f}) | {c['acc_norm']} ({m['acc_norm']:.4f}) "
              f"| {se('acc_stderr')} | {se('acc_norm_stderr')} |")
    ok, _ = compare_items(ref, lme, n, allowed=0)
    ok &= counts(lme["metrics"], n) == counts(cli, n) and tc["mismatches"] == 0
    for k in ("acc_stderr", "acc_norm_stderr"):
        ok &= abs(ref["metrics"][k] - lme["metrics"][k]) < 1e-12
    ws = sum(1 for it in items if it["context"] != it["context"].rstrip())
    long = sum(1 for it in items for c in it["choices"]
               if len((it["context"] + c).encode()) > ref["max_length"] + 1)
    print(f"\n{ws} contexts end in whitespace (moved onto the choices), {long} requests "
          f"left-truncated to max_length {ref['max_length']} + 1")
    print(f"lm-eval: load {lme['load_s']:.2f} s, simple_evaluate {lme['evaluate_s']:.2f} s, "
          f"loglikelihood {lme['loglikelihood_s']:.2f} s; CLI process {cli['wall_s']:.2f} s")
    print("CHECK", "PASSED" if ok else "FAILED")
    return ok


def self_test_suite(path, n, seed, alphabet=32, long_contexts=True, choice_len=None):
    """Hand-made items in glassbox's shape: Markov-like bytes 0..alphabet-1 (control characters,
    whitespace among them), varied choice lengths so acc_norm differs from acc, some contexts
    ending in each whitespace character, some longer than a small model's context."""
    rng = random.Random(seed)
    spaces = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            k = rng.choice([24] * 6 + [80, 150]) if long_contexts else 24
            ctx = "".join(chr(rng.randrange(alphabet)) for _ in range(k))
            if i % 3 == 0:
                ctx = "A" + ctx + "".join(rng.choice(spaces) for _ in range(rng.randint(1, 3)))
            choices = set()
            while len(choices) < 4:
                k = choice_len or rng.randint(1, 8)
                choices.add("".join(chr(rng.randrange(alphabet)) for _ in range(k)))
            f.write(json.dumps({"context": ctx, "choices": sorted(choices),
                                "answer": rng.randrange(4)}) + "\n")


def self_test(a):
    work = tempfile.mkdtemp(prefix="eval-bench-selftest-")
    hf = os.path.join(work, "hf")
    spec = os.path.join(ROOT, "bench", "configs", a.config + ".toml")
    ok = True
    # Both twins; a short context (left truncation) and the spec's own.
    for score, seq_len in (("softmax", a.self_test_seq_len), ("softmax", 0),
                           ("sigmoid", a.self_test_seq_len)):
        shutil.rmtree(hf, ignore_errors=True)
        made = worker(a.python, "tiny-model", ["--spec", spec, "--out", hf, "--seq-len",
                                                str(seq_len), "--score", score], a.threads)
        suite = os.path.join(work, f"suite-{made['seq_len']}.jsonl")
        self_test_suite(suite, a.items, seed=11)
        print(f"\n## self-test: random {made['model_type']} from {a.config}.toml, "
              f"seq_len {made['seq_len']}, {a.items} hand-made items")
        ok &= check(a, hf, suite, work)
    print("\nSELF-TEST", "PASSED" if ok else "FAILED", f"(files in {work})")
    return ok


def sweep(a):
    """lm-eval's loglikelihood time per batch size, on --hf/--suite (or a self-test model)."""
    work = tempfile.mkdtemp(prefix="eval-bench-sweep-")
    hf, suite = a.hf, a.suite
    if not hf:
        hf = os.path.join(work, "hf")
        worker(a.python, "tiny-model", ["--spec", os.path.join(ROOT, "bench", "configs",
               a.config + ".toml"), "--out", hf, "--seq-len", "0"], a.threads)
    if not suite:
        suite = os.path.join(work, "suite.jsonl")
        # glassbox's generated shape: 24-symbol contexts, four 6-symbol choices.
        self_test_suite(suite, a.items, seed=11, long_contexts=False, choice_len=6)
    task_dir = write_task(suite, work)
    print(f"| batch size | loglikelihood s | items/s | simple_evaluate s | acc | acc_norm |")
    print("|---|---|---|---|---|---|")
    for _ in range(a.rounds):                          # interleaved: a loaded machine drifts
        for bs in a.sweep.split(","):
            r = lm_eval_api(a, hf, task_dir, bs)
            print(f"| {bs} ({r['batch_sizes_detected'] or r['batch_size']}) | "
                  f"{r['loglikelihood_s']:.2f} | {r['items'] / r['loglikelihood_s']:.0f} | "
                  f"{r['evaluate_s']:.2f} | {r['metrics']['acc']:.4f} | "
                  f"{r['metrics']['acc_norm']:.4f} |", flush=True)


def glassbox_eval(a, run, lab, suite="bench-choice"):
    out = sh([a.glassbox, "eval", run, "--suite", suite, "--threads", str(a.threads),
              "--json", "--lab", lab])
    try:
        j = json.loads(out)
        m = j["metrics"]
        missing = [k for k in ("acc", "acc_norm", "acc_stderr", "acc_norm_stderr") if k not in m]
        if missing or "items" not in j or "seconds" not in j:
            raise KeyError(missing or "items/seconds")
        return j
    except (ValueError, KeyError, TypeError) as e:
        sys.exit(f"`glassbox eval --json` broke the contract ({e!r}): metrics.acc, "
                 f"metrics.acc_norm, metrics.acc_stderr, metrics.acc_norm_stderr, items, seconds "
                 f"expected; it printed:\n{out}")


def varied_check(a, run, lab, hf, work):
    """The rules a generated suite cannot exercise (its choices are all 6 symbols and its
    contexts fit): a hand-made suite with choices of 1 to 8 characters (acc_norm's division),
    a third of the contexts ending in whitespace (moved onto the choices) and some longer than
    the model's context (left truncation), scored by glassbox, lm-eval and the reference."""
    suite = os.path.join(work, "varied.jsonl")
    self_test_suite(suite, a.varied_items, seed=12)
    sh([a.glassbox, "data", "eval-suite", "import", suite, "--name", "bench-varied", "--kind",
        a.kind, "--lab", lab])
    n = a.varied_items
    g = glassbox_eval(a, run, lab, "bench-varied")
    lme = lm_eval_api(a, hf, write_task(suite, work), a.lm_eval_batch_size)
    ref = worker(a.python, "reference", ["--hf", hf, "--suite", suite], a.threads)
    gc, lc, rc = (counts(x["metrics"], n) for x in (g, lme, ref))
    print(f"\nvaried suite ({n} items: choices of 1-8 characters, whitespace-ending and "
          f"over-long contexts)\n\n| | glassbox | lm-eval | reference |\n|---|---|---|---|")
    for k in ("acc", "acc_norm"):
        print(f"| {k} (items) | {gc[k]} | {lc[k]} | {rc[k]} |")
    compare_items(ref, lme, n, allowed=2)
    agree = all(abs(gc[k] - lc[k]) <= a.tolerance for k in gc)
    return {"items": n, "glassbox_counts": gc, "lm_eval_counts": lc, "reference_counts": rc,
            "agree": agree}


def bench(a):
    if not os.path.exists(a.glassbox):
        sys.exit(f"{a.glassbox} not found: cargo build --release first")
    work = tempfile.mkdtemp(prefix="eval-bench-")
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
    suite = os.path.join(work, "suite.jsonl")
    # The generator's flag for the spec is --from (src/cli/eval.rs); --markov-from elsewhere.
    # The kind is spelt multiple-choice (clap's value names), multiple_choice in the record.
    help_text = sh([a.glassbox, "data", "eval-suite", "generate", "--help"])
    from_flag = "--markov-from" if "--markov-from" in help_text else "--from"
    a.kind = "multiple-choice" if "multiple-choice" in help_text else "multiple_choice"
    sh([a.glassbox, "data", "eval-suite", "generate", "--kind", a.kind, "--items",
        str(a.items), from_flag, spec_path, "--seed", "11", "--out", suite])
    sh([a.glassbox, "data", "eval-suite", "import", suite, "--name", "bench-choice", "--kind",
        a.kind, "--lab", lab])
    items = load_items(suite)
    n = len(items)
    ws = sum(1 for it in items if it["context"] != it["context"].rstrip())
    lens = {len(c) for it in items for c in it["choices"]}
    print(f"{n} items, {ws} contexts end in str.isspace() characters, choice lengths {sorted(lens)}"
          + (" (all equal: acc_norm picks what acc picks)" if len(lens) == 1 else ""), flush=True)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"WARNING: load average {load:.1f} before the rounds: with {a.threads} threads on a "
              f"busy machine torch's thread barriers stall (lm-eval runs many small ops), so the "
              f"timings and their ratio are not comparable", flush=True)
    task_dir = write_task(suite, work)
    cli = None
    ours, theirs = [], []
    for r in range(a.rounds):
        g = glassbox_eval(a, run, lab)
        if g["items"] != n:
            sys.exit(f"glassbox eval scored {g['items']} items, the suite has {n}")
        ours.append(g)
        theirs.append(lm_eval_api(a, hf, task_dir, a.lm_eval_batch_size))
        if r == 0 and a.cli:
            cli = lm_eval_cli(a, hf, task_dir, work, a.lm_eval_batch_size)
        t = theirs[-1]
        print(f"round {r + 1}: glassbox {n / g['seconds']:.0f} items/s ({g['seconds']:.2f} s), "
              f"lm-eval {n / t['loglikelihood_s']:.0f} items/s (loglikelihood "
              f"{t['loglikelihood_s']:.2f} s, simple_evaluate {t['evaluate_s']:.2f} s, "
              f"load {t['load_s']:.2f} s)", flush=True)
    ref = None
    if a.reference:
        ref = worker(a.python, "reference", ["--hf", hf, "--suite", suite], a.threads)
    med = statistics.median
    g_ips = med(n / g["seconds"] for g in ours)
    l_ips = med(n / t["loglikelihood_s"] for t in theirs)
    l_eval_ips = med(n / t["evaluate_s"] for t in theirs)
    gc, lc = counts(ours[0]["metrics"], n), counts(theirs[0]["metrics"], n)
    stable = all(counts(x["metrics"], n) == gc for x in ours) and \
        all(counts(x["metrics"], n) == lc for x in theirs)
    diff = {k: gc[k] - lc[k] for k in gc}
    print(f"\n`{a.config}`, {n} items, {a.threads} threads, median of {a.rounds} rounds; "
          f"lm-eval batch size {a.lm_eval_batch_size}\n")
    print("| | glassbox eval | lm-eval (loglikelihood phase) | lm-eval (simple_evaluate) |")
    print("|---|---|---|---|")
    print(f"| items/s | {g_ips:.0f} | {l_ips:.0f} | {l_eval_ips:.0f} |")
    print(f"| ratio glassbox / lm-eval | | {g_ips / l_ips:.2f}x | {g_ips / l_eval_ips:.2f}x |")
    for k in ("acc", "acc_norm"):
        print(f"| {k} (items of {n}) | {gc[k]} ({ours[0]['metrics'][k]:.4f}) | "
              f"{lc[k]} ({theirs[0]['metrics'][k]:.4f}) | |")
    for k in ("acc_stderr", "acc_norm_stderr"):
        print(f"| {k} | {ours[0]['metrics'][k]:.6f} | {theirs[0]['metrics'][k]:.6f} | |")
    if cli:
        print(f"\n`lm_eval` command line: {cli['wall_s']:.1f} s process wall (model load "
              f"included; its own total_evaluation_time_seconds {cli['total_evaluation_time_seconds']:.1f}), "
              f"acc {cli['acc']:.4f}, acc_norm {cli['acc_norm']:.4f}")
    if ref:
        rc = counts(ref["metrics"], n)
        print(f"pure-transformers reference: acc {rc['acc']}, acc_norm {rc['acc_norm']}")
        compare_items(ref, theirs[0], n, allowed=2)
    ok = stable and all(abs(v) <= a.tolerance for v in diff.values())
    if cli:
        ok &= counts(cli, n) == lc
    varied = None
    if a.varied_items:
        varied = varied_check(a, run, lab, hf, work)
        ok &= varied["agree"]
    print(json.dumps({"config": a.config, "items": n, "threads": a.threads, "rounds": a.rounds,
                      "lm_eval_batch_size": a.lm_eval_batch_size,
                      "glassbox_items_per_s": g_ips, "lm_eval_items_per_s": l_ips,
                      "lm_eval_items_per_s_simple_evaluate": l_eval_ips,
                      "ratio": g_ips / l_ips, "meets_3x": g_ips / l_ips >= 3.0,
                      "glassbox_counts": gc, "lm_eval_counts": lc, "difference": diff,
                      "varied_suite": varied, "metrics_agree": ok}, indent=2))
    if not ok:
        sys.exit(f"acc/acc_norm disagree beyond {a.tolerance} item(s) (or vary across rounds): "
                 f"glassbox {gc}, lm-eval {lc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--glassbox", default=os.path.join(ROOT, "target/release/glassbox"))
    ap.add_argument("--config", default="default", help="a spec in bench/configs/ (name only)")
    ap.add_argument("--items", type=int, default=None,
                    help="suite items (default 10000; --self-test 200, --sweep 2000)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lm-eval-batch-size", default=DEFAULT_BATCH,
                    help="lm-eval's --batch_size: an integer or auto (default %(default)s)")
    ap.add_argument("--max-batch-size", type=int, default=512,
                    help="lm-eval's max_batch_size, the ceiling of batch_size=auto")
    ap.add_argument("--python", default=DEFAULT_PYTHON, help="the lm-eval virtualenv's python")
    ap.add_argument("--tolerance", type=int, default=2,
                    help="items acc/acc_norm may differ by (float32 near-ties)")
    ap.add_argument("--no-cli", dest="cli", action="store_false",
                    help="skip the lm_eval command-line run of round 1")
    ap.add_argument("--varied-items", type=int, default=1000,
                    help="items of the hand-made varied suite also compared (0: none)")
    ap.add_argument("--reference", action="store_true",
                    help="also score the suite with the pure-transformers reference")
    ap.add_argument("--check", action="store_true",
                    help="reference vs lm-eval on --hf and --suite")
    ap.add_argument("--self-test", action="store_true",
                    help="--check on a tiny random model and hand-made items (no glassbox)")
    ap.add_argument("--self-test-seq-len", type=int, default=64)
    ap.add_argument("--sweep", help="comma-separated lm-eval batch sizes to time, e.g. 1,16,64,auto")
    ap.add_argument("--hf", help="an exported model directory")
    ap.add_argument("--suite", help="a multiple-choice JSONL")
    # Internal: a worker under the lm-eval interpreter.
    ap.add_argument("--worker", choices=["lm-eval", "reference", "tiny-model", "tokenizer-check"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--task-dir", help=argparse.SUPPRESS)
    ap.add_argument("--batch-size", default="1", help=argparse.SUPPRESS)
    ap.add_argument("--no-stderr", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--seq-len", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--score", choices=["softmax", "sigmoid"], help=argparse.SUPPRESS)
    ap.add_argument("--init-std", type=float, default=0.3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.items is None:
        a.items = 200 if a.self_test else 2000 if a.sweep else 10000
    if a.worker:
        {"lm-eval": w_lm_eval, "reference": w_reference, "tiny-model": w_tiny_model,
         "tokenizer-check": w_tokenizer_check}[a.worker](a)
    elif a.self_test:
        sys.exit(0 if self_test(a) else 1)
    elif a.sweep:
        sweep(a)
    elif a.check:
        if not (a.hf and a.suite):
            sys.exit("--check needs --hf DIR and --suite JSONL")
        sys.exit(0 if check(a, a.hf, a.suite, tempfile.mkdtemp(prefix="eval-bench-check-")) else 1)
    else:
        bench(a)


if __name__ == "__main__":
    main()
