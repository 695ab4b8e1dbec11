#!/usr/bin/env python3
"""Writes small pretraining datasets in the layouts people download, for Kiln's tests of
dataset_type=hf: seeded English-like documents (a word list, varied lengths, some longer than
a training sequence) as

  DIR/parquet/data/train-0000i-of-00003.parquet   the Hugging Face datasets layout: a `text`
                                                  column beside `id` and `url`, several row
                                                  groups per file (pyarrow)
  DIR/gz/part-0000i.jsonl.gz                      JSON Lines, gzip
  DIR/zst/part-0000i.jsonl.zst                    JSON Lines, zstd (pyarrow's codec)

Usage: make_hf_datasets.py DIR [--docs N]   (run with the project venv's python)"""
import argparse
import gzip
import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

WORDS = ("the of and to in is was that for on with as by at from his her they which be this "
         "river mountain light stone water forest city road night morning garden letter window "
         "quiet ancient bright silver careful distant gentle sudden narrow golden hollow "
         "walked carried remembered opened followed listened wondered gathered answered").split()


def documents(n, seed):
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 60))]
        docs.append(f"Document {i}. " + " ".join(words).capitalize() + ".")
    return docs


def split(docs, parts):
    size = (len(docs) + parts - 1) // parts
    return [docs[i * size:(i + 1) * size] for i in range(parts)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--docs", type=int, default=600)
    a = ap.parse_args()
    for name, seed in (("parquet", 1), ("gz", 2), ("zst", 3)):
        docs = documents(a.docs, seed)
        parts = split(docs, 3)
        for i, part in enumerate(parts):
            if name == "parquet":
                os.makedirs(os.path.join(a.dir, "parquet", "data"), exist_ok=True)
                table = pa.table({"id": [f"{i}-{j}" for j in range(len(part))], "text": part,
                                  "url": [f"https://example.org/{i}/{j}" for j in range(len(part))]})
                pq.write_table(table, os.path.join(a.dir, "parquet", "data", f"train-{i:05d}-of-00003.parquet"),
                               row_group_size=64)
                continue
            os.makedirs(os.path.join(a.dir, name), exist_ok=True)
            lines = "".join(json.dumps({"text": t, "meta": {"part": i}}) + "\n" for t in part).encode()
            path = os.path.join(a.dir, name, f"part-{i:05d}.jsonl.{name}")
            if name == "gz":
                with gzip.open(path, "wb") as f:
                    f.write(lines)
            else:
                with pa.CompressedOutputStream(path, "zstd") as f:
                    f.write(lines)
    print("ok")


if __name__ == "__main__":
    main()
