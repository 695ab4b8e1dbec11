"""Reference token ids from OpenAI's own tokenizers, for Kiln's tiktoken tokenizer.

    .venv/bin/python tests/reference/tiktoken_ref.py ENCODINGS_DIR INPUT.json > OUTPUT.json

ENCODINGS_DIR holds OpenAI's published rank files (o200k_base.tiktoken, cl100k_base.tiktoken,
p50k_base.tiktoken, r50k_base.tiktoken, gpt2.tiktoken; shared/data/tiktoken/ has them).
INPUT.json is {"encodings": [names], "texts": [strings]}, or with "texts_b64": [base64 of
raw bytes] in place of "texts" (used when present) for texts that are not valid UTF-8.

OUTPUT.json maps each encoding name to
    {"n_vocab": int, "pat_str": str, "special_tokens": {text: id},
     "ordinary": [ids per text], "all_special": [ids per text]}
with ordinary = Encoding.encode_ordinary(text) and all_special = Encoding.encode(text,
allowed_special="all"), from the Python package tiktoken. When "o200k_harmony" is among
the encodings, a top-level "harmony" object adds what the openai_harmony package (OpenAI's
GPT-OSS renderer, its own Rust tokenizer) has for HarmonyEncodingName.HARMONY_GPT_OSS:
    {"special_tokens": {text: id}, "stop_tokens": [ids],
     "stop_tokens_for_assistant_actions": [ids],
     "ordinary": [ids per text], "all_special": [ids per text]}
When any text is not valid UTF-8, a top-level "invalid_utf8": [indices of those texts].

Texts that are not valid UTF-8: tiktoken's public encode functions take str only (a str
with lone surrogates is turned into U+FFFD before encoding, so the bytes are lost), and its
one raw-bytes entry point, the private Encoding._encode_bytes, encodes the longest valid
prefix and then runs BPE over the prefix's last piece plus ALL remaining bytes as one piece
(its own source says this may not be correct, which is why it is private). So for such a
text the reference is built from tiktoken's public pieces under the rule Kiln documents:
the text is cut into maximal runs of valid UTF-8 and runs of invalid bytes; a valid run is
encode_ordinary(run) (encode(run, allowed_special="all") for "all_special"), an invalid run
is one piece, Encoding._encode_single_piece(run) (tiktoken's byte-pair merge of one piece).
"encode_bytes" keeps _encode_bytes's answer for information. openai_harmony has no
raw-bytes entry, so harmony's lists are null for such a text. Valid UTF-8 given in
"texts_b64" is decoded and treated exactly like "texts".

Nothing is fetched from the network, and no Kiln table is used:
  * tiktoken reads its rank files through tiktoken.load.read_file_cached, which looks in
    $TIKTOKEN_CACHE_DIR for a file named sha1(url) and checks it against the sha256 that
    tiktoken_ext/openai_public.py expects. The URLs are read from that module's source at
    run time, and each ENCODINGS_DIR file is linked into a temporary cache directory under
    the sha1 of its URL, so tiktoken's own constructors and hash checks run unchanged.
    (tiktoken honours no directory variable like TIKTOKEN_ENCODINGS_BASE; that one is
    openai_harmony's.)
  * gpt2: tiktoken builds it from GPT-2's data-gym files (vocab.bpe, encoder.json), which
    ENCODINGS_DIR does not have. gpt2.tiktoken holds the same ranks (byte-identical to
    r50k_base.tiktoken), so the data-gym loader is replaced for that one constructor by
    load_tiktoken_bpe(ENCODINGS_DIR/gpt2.tiktoken) checked against r50k_base's sha256;
    gpt2's pat_str, special tokens and explicit_n_vocab still come from tiktoken.
  * openai_harmony (Rust) reads $TIKTOKEN_ENCODINGS_BASE/o200k_base.tiktoken, checking its
    sha256, when that variable is set; it is set to ENCODINGS_DIR (and TIKTOKEN_RS_CACHE_DIR,
    its download cache, to the temporary directory).
  * As a guard, tiktoken.load.read_file refuses any URL, so a missing file fails loudly
    instead of being downloaded.
"""

import base64
import hashlib
import inspect
import json
import os
import re
import sys
import tempfile

FILES = ["o200k_base", "cl100k_base", "p50k_base", "r50k_base", "gpt2"]


def die(msg):
    print(f"tiktoken_ref.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    if len(sys.argv) != 3:
        die("usage: tiktoken_ref.py ENCODINGS_DIR INPUT.json > OUTPUT.json")
    enc_dir = os.path.abspath(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        spec = json.load(f)
    names = spec["encodings"]

    # Each text as str when it is valid UTF-8, else as its raw bytes.
    if "texts_b64" in spec:
        texts = []
        for b64 in spec["texts_b64"]:
            raw = base64.b64decode(b64, validate=True)
            try:
                texts.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(raw)
    else:
        texts = list(spec["texts"])
    invalid = [i for i, t in enumerate(texts) if isinstance(t, bytes)]

    with tempfile.TemporaryDirectory(prefix="tiktoken_ref.") as cache:
        # Set before importing either package.
        os.environ["TIKTOKEN_CACHE_DIR"] = cache
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = enc_dir
        os.environ["TIKTOKEN_RS_CACHE_DIR"] = cache

        import tiktoken
        import tiktoken.load
        import tiktoken_ext.openai_public as openai_public

        def no_network(blobpath, _read_file=tiktoken.load.read_file):
            if "://" in blobpath:
                raise RuntimeError(f"refusing to fetch {blobpath}: not in {enc_dir}")
            return _read_file(blobpath)

        tiktoken.load.read_file = no_network

        # URL and expected sha256 of each rank file, as tiktoken's constructors name them.
        source = inspect.getsource(openai_public)
        urls = {}
        for url, sha in re.findall(
            r'load_tiktoken_bpe\(\s*"([^"]+)",\s*expected_hash="([0-9a-f]{64})"', source
        ):
            urls[os.path.basename(url)] = (url, sha)
        for base in FILES:
            path = os.path.join(enc_dir, base + ".tiktoken")
            if base + ".tiktoken" in urls and os.path.exists(path):
                url = urls[base + ".tiktoken"][0]
                os.symlink(path, os.path.join(cache, hashlib.sha1(url.encode()).hexdigest()))

        def gpt2_ranks(**_data_gym_files):
            return tiktoken.load.load_tiktoken_bpe(
                os.path.join(enc_dir, "gpt2.tiktoken"),
                expected_hash=urls["r50k_base.tiktoken"][1],
            )

        out = {}
        for name in names:
            if name not in openai_public.ENCODING_CONSTRUCTORS:
                die(f"tiktoken {tiktoken.__version__} has no encoding {name!r}")
            if name == "gpt2":
                saved = openai_public.data_gym_to_mergeable_bpe_ranks
                openai_public.data_gym_to_mergeable_bpe_ranks = gpt2_ranks
                try:
                    enc = tiktoken.get_encoding(name)
                finally:
                    openai_public.data_gym_to_mergeable_bpe_ranks = saved
            else:
                enc = tiktoken.get_encoding(name)
            out[name] = {
                "n_vocab": enc.n_vocab,
                "pat_str": enc._pat_str,
                "special_tokens": dict(sorted(enc._special_tokens.items(), key=lambda kv: kv[1])),
                "ordinary": [
                    by_runs(enc, t, enc.encode_ordinary) if isinstance(t, bytes) else enc.encode_ordinary(t)
                    for t in texts
                ],
                "all_special": [
                    by_runs(enc, t, lambda s: enc.encode(s, allowed_special="all"))
                    if isinstance(t, bytes)
                    else enc.encode(t, allowed_special="all")
                    for t in texts
                ],
                "encode_bytes": [enc._encode_bytes(t) if isinstance(t, bytes) else None for t in texts],
            }

        if "o200k_harmony" in names:
            out["harmony"] = harmony(texts)
        if invalid:
            out["invalid_utf8"] = invalid

    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


def utf8_runs(raw):
    """[(is_valid, bytes)]: maximal runs of valid UTF-8 and of invalid bytes, in order."""
    runs = []
    pos = 0
    while pos < len(raw):
        try:
            raw[pos:].decode("utf-8")
            runs.append((True, raw[pos:]))
            break
        except UnicodeDecodeError as e:
            if e.start > 0:
                runs.append((True, raw[pos : pos + e.start]))
            bad = raw[pos + e.start : pos + e.end]
            if runs and not runs[-1][0]:
                runs[-1] = (False, runs[-1][1] + bad)
            else:
                runs.append((False, bad))
            pos += e.end
    return runs


def by_runs(enc, raw, encode_text):
    ids = []
    for valid, run in utf8_runs(raw):
        ids += encode_text(run.decode("utf-8")) if valid else enc._encode_single_piece(run)
    return ids


def harmony(texts):
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    # The package lists its special tokens' texts; each one encodes (allowed) to its id.
    # (disallowed_special=() skips the wrapper's scan for the other specials, which builds
    # a regex of all ~1,100 of them on every call.)
    specials = {}
    for text in enc.special_tokens_set:
        ids = enc.encode(text, allowed_special={text}, disallowed_special=())
        if len(ids) != 1 or not enc.is_special_token(ids[0]):
            die(f"openai_harmony encodes special token {text!r} as {ids}")
        specials[text] = ids[0]
    return {
        "special_tokens": dict(sorted(specials.items(), key=lambda kv: kv[1])),
        "stop_tokens": sorted(enc.stop_tokens()),
        "stop_tokens_for_assistant_actions": sorted(enc.stop_tokens_for_assistant_actions()),
        "ordinary": [
            None if isinstance(t, bytes) else enc.encode(t, disallowed_special=()) for t in texts
        ],
        "all_special": [
            None if isinstance(t, bytes) else enc.encode(t, allowed_special="all") for t in texts
        ],
    }


if __name__ == "__main__":
    main()
