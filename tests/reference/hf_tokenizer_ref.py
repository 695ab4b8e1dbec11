"""Hugging Face tokenizer.json files and reference token ids, for Kiln's tokenizer_type=huggingface.

    .venv/bin/python tests/reference/hf_tokenizer_ref.py ENCODINGS_DIR OUT_DIR INPUT.json > OUTPUT.json

No tokenizer data is committed and nothing is fetched from a hub: the tokenizer.json files
are built here from OpenAI's published .tiktoken rank files in ENCODINGS_DIR
(shared/data/tiktoken/ has them), the way transformers' TikTokenConverter
(convert_slow_tokenizer.py) turns a tiktoken encoding into a byte-level BPE, through the
PyPI package `tokenizers` only: vocab = the ranks spelled in GPT-2's byte-to-unicode
alphabet; merges = for each token in rank order, every split into two tokens, ordered by
(rank of the left part, rank of the right part); pre_tokenizer = Split(pattern, Isolated) +
ByteLevel(add_prefix_space=False, use_regex=False); decoder ByteLevel; special tokens added
as special, unnormalized added tokens in id order (ids checked). Each file is written to
OUT_DIR/<variant>/tokenizer.json and read back with Tokenizer.from_file, so the reference
is what `tokenizers` does with exactly that file.

Variants (each covers paths the others do not):
  o200k_harmony  GPT-OSS's: o200k_base's ranks and pattern, the harmony special tokens
                 (one name per id: 200018 is <|endofprompt|>), ignore_merges=True and the
                 ByteLevel post-processor, as the converter sets them
  cl100k_base    cl100k_base with its special tokens (the id holes filled by
                 <|reserved_N|> so ids stay tiktoken's), ignore_merges=False, merges in the
                 legacy "a b" string form, no post-processor
  llama3_style   cl100k_base's ranks with Llama 3's settings: ignore_merges=True,
                 TemplateProcessing "<|begin_of_text|> $A", Llama-3-like special tokens; plus
                 Qwen's NFC normalizer and added tokens with every flag (lstrip, rstrip,
                 single_word, normalized, non-special)
  permuted       r50k_base's tokens with ids permuted ((rank * 7919) mod n), merges
                 reordered within blocks and every 11th one dropped, ignore_merges=False:
                 ids, merge ranks and tiktoken's byte ranks all disagree
  gpt2_style     r50k_base with a Sequence of Split steps of every other behavior (an
                 empty-matching lookahead, invert, a String pattern) before
                 ByteLevel(add_prefix_space=True, use_regex=True), and post-processors
                 Sequence[ByteLevel, TemplateProcessing "$A <|endoftext|>"]

INPUT.json is {"texts_b64": [base64 of each text's bytes], "split_patterns": [regex, ...]}.
OUTPUT.json is {"variants": {variant: V}, "splits": [per pattern: [pieces per text]]}, where
    V = {"file": path, "vocab_size": largest id + 1, "bos": id or -1, "eos": id or -1,
         "ids": [encode(text, add_special_tokens=False).ids per text],
         "with_special": [encode(text, add_special_tokens=True).ids per text],
         "decoded": [decode(ids, skip_special_tokens=False) per text]}
and the pieces are those of pre_tokenizers.Split(Regex(pattern), "isolated") (the regex
engine's matches and the text between them), so Kiln's reading of the patterns (Oniguruma's,
in Ruby syntax) can be checked on its own. null stands for a text that is not valid UTF-8
(`tokenizers` takes str only).
"""

import base64
import hashlib
import inspect
import json
import os
import re
import sys

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here reaches a hub; make sure of it

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors


def die(msg):
    print(f"hf_tokenizer_ref.py: {msg}", file=sys.stderr)
    sys.exit(2)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


SPELLING = {b: c for b, c in bytes_to_unicode().items()}  # str.translate table over latin-1


def spell(token):
    return token.decode("latin-1").translate(SPELLING)


def tiktoken_encoding(enc_dir, name):
    """Ranks, pattern and special tokens of a tiktoken encoding, from tiktoken's own
    constructor with its rank file read from enc_dir (digest checked, no cache, no network)."""
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read_file_cached: no cache
    import tiktoken.load
    import tiktoken_ext.openai_public as openai_public

    source = inspect.getsource(openai_public)
    hashes = dict(re.findall(r'load_tiktoken_bpe\(\s*"[^"]*/([^/"]+)",\s*expected_hash="([0-9a-f]{64})"', source))

    def local(url, expected_hash=None):
        path = os.path.join(enc_dir, os.path.basename(url))
        if not os.path.exists(path):
            die(f"{path} is missing (the published {os.path.basename(url)})")
        return tiktoken.load.load_tiktoken_bpe(path, expected_hash=hashes[os.path.basename(url)])

    saved = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = local
    try:
        return openai_public.ENCODING_CONSTRUCTORS[name]()
    finally:
        openai_public.load_tiktoken_bpe = saved


def converter_vocab_merges(ranks):
    """transformers' TikTokenConverter.extract_vocab_merges_from_model, the same result
    computed faster: tokens in rank order, each one's splits into two tokens ordered by
    (rank of the left part, rank of the right part)."""
    spelled = {token: spell(token) for token in ranks}
    vocab, merges = {}, []
    get = ranks.get
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[spelled[token]] = rank
        local = []
        for i in range(1, len(token)):
            left = get(token[:i])
            if left is not None:
                right = get(token[i:])
                if right is not None:
                    local.append((left, right, i))
        local.sort()
        merges.extend((spelled[token[:i]], spelled[token[i:]]) for _, _, i in local)
    return vocab, merges


def specials_by_id(special_tokens):
    """{id: text}, the first name of an id kept (o200k_harmony names 200018 twice)."""
    out = {}
    for text, i in special_tokens.items():
        out.setdefault(i, text)
    return dict(sorted(out.items()))


def fill_holes(first, specials):
    """Special tokens from `first` on with every id up to the last one named."""
    last = max(specials)
    return [(i, specials.get(i, f"<|reserved_{i}|>")) for i in range(first, last + 1)]


def add_in_id_order(tok, tokens):
    """tokens: [(id, AddedToken)] in order; `tokenizers` gives each the next id (or the
    vocabulary's id of a text the model has), which must be `id` unless that is None."""
    run = []
    for k, (_, t) in enumerate(tokens):
        run.append(t)
        if k + 1 == len(tokens) or tokens[k + 1][1].special != t.special:
            (tok.add_special_tokens if t.special else tok.add_tokens)(run)
            run = []
    for i, t in tokens:
        got = tok.token_to_id(t.content)
        if i is not None and got != i:
            die(f"added token {t.content!r} got id {got}, wanted {i}")


def byte_level_bpe(vocab, merges, pattern, ignore_merges):
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def special(text):
    return AddedToken(text, special=True, normalized=False)


def build_variants(enc_dir):
    """{variant: (Tokenizer, bos, eos, legacy_merges)}"""
    out = {}
    o200k = tiktoken_encoding(enc_dir, "o200k_harmony")
    vocab, merges = converter_vocab_merges(o200k["mergeable_ranks"])
    tok = byte_level_bpe(vocab, merges, o200k["pat_str"], ignore_merges=True)
    add_in_id_order(tok, [(i, special(s)) for i, s in specials_by_id(o200k["special_tokens"]).items()])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    out["o200k_harmony"] = (tok, -1, -1, False)

    cl100k = tiktoken_encoding(enc_dir, "cl100k_base")
    ranks = cl100k["mergeable_ranks"]
    vocab, merges = converter_vocab_merges(ranks)
    tok = byte_level_bpe(vocab, merges, cl100k["pat_str"], ignore_merges=False)
    named = specials_by_id(cl100k["special_tokens"])
    add_in_id_order(tok, [(i, special(s)) for i, s in fill_holes(len(ranks), named)])
    out["cl100k_base"] = (tok, -1, -1, True)

    tok = byte_level_bpe(vocab, merges, cl100k["pat_str"], ignore_merges=True)
    tok.normalizer = normalizers.NFC()
    n = len(ranks)
    llama = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
             "<|eot_id|>", "<|python_tag|>"]
    added = [(n + k, special(s)) for k, s in enumerate(llama)]
    flagged = [
        AddedToken("<mask>", special=True, normalized=False, lstrip=True),
        AddedToken("<sep>", special=True, normalized=False, rstrip=True),
        AddedToken("<tool_call>", special=False, normalized=False),
        AddedToken("word", special=False, normalized=True, single_word=True),  # a vocabulary token
        AddedToken("caf\u00e9", special=False, normalized=True),  # matched in NFC text
        AddedToken("<|lr|>", special=True, normalized=False, lstrip=True, rstrip=True),
    ]
    added += [(None, t) for t in flagged]
    add_in_id_order(tok, added)
    bos = n
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)],
    )
    out["llama3_style"] = (tok, bos, -1, False)

    r50k = tiktoken_encoding(enc_dir, "r50k_base")
    ranks = r50k["mergeable_ranks"]
    vocab, merges = converter_vocab_merges(ranks)
    n = len(ranks)
    eot = r50k["special_tokens"]["<|endoftext|>"]

    # Ids permuted; merges shuffled within blocks of 64 merged-token ranks; every 11th dropped.
    perm = {spell(t): (r * 7919) % n for t, r in ranks.items()}
    assert len(set(perm.values())) == n
    merged_rank = {spell(t): r for t, r in ranks.items()}
    keyed = []
    for k, (a, b) in enumerate(merges):
        if k % 11 == 10:
            continue
        block = merged_rank[a + b] // 64
        keyed.append((block, hashlib.sha256((a + " " + b).encode()).digest(), a, b))
    keyed.sort()
    tok = byte_level_bpe(perm, [(a, b) for _, _, a, b in keyed], r50k["pat_str"], ignore_merges=False)
    add_in_id_order(tok, [(eot, special("<|endoftext|>"))])
    out["permuted"] = (tok, -1, -1, False)

    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"(?=[A-Z])"), behavior="isolated"),
            pre_tokenizers.Split(Regex(r"\d"), behavior="merged_with_previous"),
            pre_tokenizers.Split(Regex(r"[.!?]"), behavior="merged_with_next"),
            pre_tokenizers.Split("||", behavior="removed"),
            pre_tokenizers.Split(Regex(r"\p{L}+"), behavior="contiguous", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    add_in_id_order(tok, [(eot, special("<|endoftext|>"))])
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", eot)]),
        ]
    )
    out["gpt2_style"] = (tok, -1, eot, False)
    return out


def main():
    if len(sys.argv) != 4:
        die("usage: hf_tokenizer_ref.py ENCODINGS_DIR OUT_DIR INPUT.json > OUTPUT.json")
    enc_dir, out_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with open(sys.argv[3], encoding="utf-8") as f:
        spec = json.load(f)
    texts = []
    for b64 in spec["texts_b64"]:
        raw = base64.b64decode(b64, validate=True)
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(None)

    splits = []
    for pattern in spec.get("split_patterns", []):
        split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        splits.append([None if t is None else [piece for piece, _ in split.pre_tokenize_str(t)] for t in texts])

    out = {}
    for name, (tok, bos, eos, legacy_merges) in build_variants(enc_dir).items():
        path = os.path.join(out_dir, name, "tokenizer.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if legacy_merges:
            doc = json.loads(tok.to_str())
            doc["model"]["merges"] = [f"{a} {b}" for a, b in doc["model"]["merges"]]
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False)
        else:
            tok.save(path)
        tok = Tokenizer.from_file(path)
        ids = [None if t is None else tok.encode(t, add_special_tokens=False).ids for t in texts]
        out[name] = {
            "file": path,
            "vocab_size": 1 + max(tok.get_vocab(with_added_tokens=True).values()),
            "bos": bos,
            "eos": eos,
            "ids": ids,
            "with_special": [None if t is None else tok.encode(t, add_special_tokens=True).ids for t in texts],
            "decoded": [None if i is None else tok.decode(i, skip_special_tokens=False) for i in ids],
        }
    json.dump({"variants": out, "splits": splits}, sys.stdout, separators=(",", ":"), ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
