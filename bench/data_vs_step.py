#!/usr/bin/env python3
"""Does the data pipeline keep up with training? dataset_type=hf's pipeline alone (Parquet ->
tokens -> packed batches, build/bench/data_pipeline_bench) at 1 and 2 tokenizer threads,
beside what a gpt-oss-small training step consumes (tokens/s/device of `kiln train`, the
same machine, same run), and beside PyPI's `tokenizers` and `tiktoken` encoding the same
documents on one thread.

The text is Debian's fortunes corpus, each fortune a document, 40 times over (~3.9 MB),
written as Parquet (snappy, row groups of 1024) by the venv's pyarrow. The tokenizer is
GPT-OSS's o200k_harmony, both as a .tiktoken encoding (tokenizer_type=tiktoken) and as the
tokenizer.json that transformers' TikTokenConverter makes of it (tokenizer_type=huggingface,
built here with `tokenizers`, tests/reference/hf_tokenizer_ref.py); it needs the published
.tiktoken files ($KILN_TOKENIZER_DIR).

Usage: .venv/bin/python bench/data_vs_step.py [--kiln build/kiln] [--steps 6] [--json OUT]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))


def fortunes_docs():
    docs = []
    for name in ("fortunes", "literature", "riddles"):
        with open(f"/usr/share/games/fortunes/{name}", encoding="utf-8", errors="replace") as f:
            docs += [d.strip("\n") + "\n" for d in f.read().split("\n%\n") if d.strip()]
    return docs * 40


def pipeline(bench, path, tokenizer_type, tokenizer_path, tok_dir):
    env = dict(os.environ, KILN_TOKENIZER_DIR=tok_dir)
    out = subprocess.run([bench, "--path", path, "--tokenizer_type", tokenizer_type, "--tokenizer_path", tokenizer_path,
                          "--batches", "60", "--threads", "1,2"], check=True, capture_output=True, text=True,
                         env=env).stdout
    print(out, end="")
    return json.loads(re.search(r"^json: (.*)$", out, re.M).group(1))


def consumption(kiln, steps, out_dir):
    cmd = [kiln, "train", "model_name=gpt-oss-small", f"steps={steps}", "dataset_type=synthetic",
           "reuse_example_batch=1", "enable_checkpointing=false", "run_name=consume", f"base_output_directory={out_dir}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    rates = []
    with open(os.path.join(out_dir, "consume", "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["step"] >= 2:
                rates.append(r["tokens_per_s_per_device"])
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json")
    a = ap.parse_args()
    tok_dir = os.environ.get("KILN_TOKENIZER_DIR", os.path.join(ROOT, "..", "shared", "data", "tiktoken"))
    if not os.path.exists(os.path.join(tok_dir, "o200k_base.tiktoken")):
        sys.exit(f"data_vs_step: no o200k_base.tiktoken in {tok_dir}: set KILN_TOKENIZER_DIR")
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tiktoken
    import hf_tokenizer_ref as ref

    bench = os.path.join(os.path.dirname(os.path.abspath(a.kiln)), "bench", "data_pipeline_bench")
    docs = fortunes_docs()
    mb = sum(len(d.encode()) for d in docs) / 1e6
    with tempfile.TemporaryDirectory(prefix="kiln_data_vs_step_") as tmp:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        pq.write_table(pa.table({"text": docs}), os.path.join(data, "train-00000-of-00001.parquet"),
                       row_group_size=1024)
        # GPT-OSS's tokenizer.json, as transformers' converter makes it.
        enc = ref.tiktoken_encoding(tok_dir, "o200k_harmony")
        vocab, merges = ref.converter_vocab_merges(enc["mergeable_ranks"])
        hf = ref.byte_level_bpe(vocab, merges, enc["pat_str"], ignore_merges=True)
        ref.add_in_id_order(hf, [(i, ref.special(s)) for i, s in ref.specials_by_id(enc["special_tokens"]).items()])
        tok_json = os.path.join(tmp, "tokenizer.json")
        hf.save(tok_json)

        print(f"text: {len(docs)} documents, {mb:.1f} MB (fortunes x 40), Parquet")
        results = {"mb": mb, "documents": len(docs)}
        results["kiln_tiktoken"] = pipeline(bench, data, "tiktoken", "o200k_harmony", tok_dir)
        results["kiln_huggingface"] = pipeline(bench, data, "huggingface", tok_json, tok_dir)

        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        t0 = time.perf_counter()
        n = sum(len(hf.encode(d, add_special_tokens=False).ids) for d in docs)
        s = time.perf_counter() - t0
        results["pypi_tokenizers"] = {"tokens_per_s": n / s, "mb_per_s": mb / s}
        print(f"PyPI tokenizers, 1 thread: {n} tokens in {s:.2f} s = {n / s:.0f} tokens/s, {mb / s:.1f} MB/s")
        tt = tiktoken.Encoding(name="o200k_harmony", pat_str=enc["pat_str"], mergeable_ranks=enc["mergeable_ranks"],
                               special_tokens=enc["special_tokens"])
        t0 = time.perf_counter()
        n = sum(len(tt.encode_ordinary(d)) for d in docs)
        s = time.perf_counter() - t0
        results["pypi_tiktoken"] = {"tokens_per_s": n / s, "mb_per_s": mb / s}
        print(f"PyPI tiktoken, 1 thread: {n} tokens in {s:.2f} s = {n / s:.0f} tokens/s, {mb / s:.1f} MB/s")

        step = consumption(a.kiln, a.steps, os.path.join(tmp, "runs"))
        results["step_tokens_per_s_per_device"] = step
        print(f"gpt-oss-small training consumes {step:.0f} tokens/s per device (median of steps 2..{a.steps - 1})")
        for name in ("kiln_tiktoken", "kiln_huggingface"):
            for threads, rate in sorted(results[name]["pipeline_tokens_per_s"].items()):
                print(f"  {name}, {threads} thread(s): the pipeline makes {rate / step:.1f}x what a step consumes")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
