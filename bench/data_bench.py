"""Real-data throughput: tokenizing against the Python `tokenizers` package, and importing a
large JSONL file against `b3sum` (issue 18's targets).

Usage (from the repository root):
    cargo build --release --bin glassbox
    python3 -m venv /tmp/tokbench && /tmp/tokbench/bin/pip install tokenizers==0.23.2
    apt-get install b3sum time   # the BLAKE3 reference tool; GNU time for peak RSS
    /tmp/tokbench/bin/python bench/data_bench.py [--glassbox target/release/glassbox]
        [--text-mb 100] [--import-mb 1024] [--rounds 3] [--workdir /tmp/gb-data-bench]

1. Tokenizing. Writes >= --text-mb of JSONL documents (paragraphs of the text in
   tests/data/tinyshakespeare.txt, each varied by its index so the file is not one repeated
   block), imports it, trains a byte-level BPE tokenizer (vocab 32,000) on a 5 MB corpus, then
   alternates, --rounds times: `glassbox data tokenize` (in a fresh copy of the lab each round,
   so nothing is reused) and the Python package's
   `Tokenizer.encode_batch` over the same documents with the same `tokenizer.json`, in batches
   of the same size (16 MiB of text), TOKENIZERS_PARALLELISM on, same cores. Both sides read
   the JSONL and count tokens; glassbox also hashes, writes the shard and records the entry.
   Reports tokens/s of each and the median of per-round ratios (target >= 0.8).
2. Import. Writes a --import-mb JSONL file under --workdir, then alternates `glassbox data
   import` into a fresh lab and `b3sum` of the same file, --rounds times; reports each wall
   time, glassbox's peak RSS (GNU time's `%M`), and the median ratio of throughputs
   (target: glassbox >= 0.5x b3sum, peak RSS <= 256 MiB).

Prints the machine's load average before and after. A benchmark, not a test: it asserts
nothing. Data stays under --workdir (never in the repository).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, **kw):
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr.decode()[-2000:]}")
    return done.stdout


def timed(cmd, **kw):
    """Wall seconds, the command's own peak RSS in MiB, and its stdout.

    The peak comes from GNU time (`/usr/bin/time -f %M`), which execs the command at once and
    reads its rusage. `os.wait4` on a child of this script would not do: Linux counts the
    child's pages from before its exec, a copy of this Python process (which has held a large
    file's text), so it reported ~770 MiB for an import that peaks at ~20 MiB. Without GNU time
    the peak is reported as unknown (None)."""
    gnu_time = os.path.exists("/usr/bin/time")
    rss_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gb-bench-rss-{os.getpid()}")
    full = ["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd if gnu_time else cmd
    start = time.monotonic()
    done = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    took = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr.decode()[-2000:]}")
    rss = None
    if gnu_time:
        with open(rss_file) as f:
            rss = int(f.read().strip().splitlines()[-1]) / 1024.0
        os.remove(rss_file)
    return took, rss, done.stdout


def paragraphs():
    path = os.path.join(ROOT, "tests", "data", "tinyshakespeare.txt")
    with open(path, encoding="utf-8") as f:
        return [p for p in f.read().split("\n\n") if p.strip()]


def write_jsonl(path, megabytes):
    paras = paragraphs()
    target = megabytes << 20
    written = 0
    i = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            p = paras[i % len(paras)]
            line = json.dumps({"id": i, "text": f"{p}\n-- {i}"}) + "\n"
            f.write(line)
            written += len(line.encode())
            i += 1
    return i


def glassbox(gb, lab, *args):
    return run([gb, *args, "--lab", lab])


def tokenize_bench(args, gb):
    work = args.workdir
    text = os.path.join(work, "text.jsonl")
    sample = os.path.join(work, "sample.jsonl")
    docs = write_jsonl(text, args.text_mb)
    write_jsonl(sample, 5)
    base = os.path.join(work, "lab-base")
    shutil.rmtree(base, ignore_errors=True)
    corpus = json.loads(glassbox(gb, base, "data", "import", "--domain", "text", text, "--json"))
    small = json.loads(glassbox(gb, base, "data", "import", "--domain", "sample", sample, "--json"))
    tok = json.loads(glassbox(gb, base, "data", "tokenizer", "train", "--vocab", "32000",
                              "--from", small["hash"], "--json"))
    hexh = tok["hash"].split(":")[1]
    tok_json = os.path.join(base, "blobs", hexh[:2], hexh[2:])
    print(f"tokenizing: {docs} documents, {os.path.getsize(text) >> 20} MiB of JSONL, "
          f"tokenizer {tok['hash']} (vocab {tok['body']['vocab_size']})")

    from tokenizers import Tokenizer  # the pinned Python package
    py_tok = Tokenizer.from_file(tok_json)

    def python_round():
        start = time.monotonic()
        tokens = 0
        batch, size = [], 0
        with open(text, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)["text"]
                batch.append(d)
                size += len(d.encode())
                if size >= 16 << 20:
                    tokens += sum(len(e.ids) + 1 for e in py_tok.encode_batch(batch, add_special_tokens=False))
                    batch, size = [], 0
        if batch:
            tokens += sum(len(e.ids) + 1 for e in py_tok.encode_batch(batch, add_special_tokens=False))
        return time.monotonic() - start, tokens

    def glassbox_round(r):
        lab = os.path.join(work, f"lab-round-{r}")
        shutil.rmtree(lab, ignore_errors=True)
        shutil.copytree(base, lab)
        took, _, out = timed([gb, "data", "tokenize", "--corpus", corpus["hash"],
                              "--tokenizer", tok["hash"], "--json", "--lab", lab])
        shutil.rmtree(lab, ignore_errors=True)
        return took, json.loads(out)["body"]["tokens"]

    ratios = []
    for r in range(args.rounds):
        g_s, g_tok = glassbox_round(r)
        p_s, p_tok = python_round()
        g_rate, p_rate = g_tok / g_s, p_tok / p_s
        ratios.append(g_rate / p_rate)
        print(f"  round {r + 1}: glassbox {g_tok} tokens in {g_s:.2f} s ({g_rate:,.0f}/s); "
              f"python {p_tok} tokens in {p_s:.2f} s ({p_rate:,.0f}/s); ratio {g_rate / p_rate:.2f}"
              + ("" if g_tok == p_tok else "  TOKEN COUNTS DIFFER"))
    print(f"tokenize: median ratio glassbox/python {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}; target >= 0.8)")


def import_bench(args, gb):
    work = args.workdir
    big = os.path.join(work, "big.jsonl")
    if not os.path.exists(big) or os.path.getsize(big) < (args.import_mb << 20):
        write_jsonl(big, args.import_mb)
    size = os.path.getsize(big)
    print(f"import: {size / (1 << 20):.0f} MiB of JSONL")
    ratios, rss = [], []
    for r in range(args.rounds):
        lab = os.path.join(work, "lab-import")
        shutil.rmtree(lab, ignore_errors=True)
        g_s, g_rss, _ = timed([gb, "data", "import", "--domain", "big", big, "--lab", lab])
        b_s, _, _ = timed(["b3sum", big])
        ratios.append(b_s / g_s)
        if g_rss is not None:
            rss.append(g_rss)
        shown = "unknown" if g_rss is None else f"{g_rss:.0f} MiB"
        print(f"  round {r + 1}: glassbox {g_s:.2f} s ({size / g_s / 1e6:.0f} MB/s, peak RSS {shown}); "
              f"b3sum {b_s:.2f} s ({size / b_s / 1e6:.0f} MB/s); ratio {b_s / g_s:.2f}")
    shutil.rmtree(os.path.join(work, "lab-import"), ignore_errors=True)
    peak = f"{max(rss):.0f} MiB" if rss else "unknown (no GNU time)"
    print(f"import: median throughput ratio glassbox/b3sum {statistics.median(ratios):.2f} "
          f"(target >= 0.5); peak RSS max {peak} (target <= 256 MiB)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--glassbox", default=os.path.join(ROOT, "target", "release", "glassbox"))
    ap.add_argument("--text-mb", type=int, default=100)
    ap.add_argument("--import-mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/gb-data-bench")
    ap.add_argument("--only", choices=["tokenize", "import"])
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} cores")
    if args.only in (None, "tokenize"):
        tokenize_bench(args, args.glassbox)
    if args.only in (None, "import"):
        import_bench(args, args.glassbox)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
