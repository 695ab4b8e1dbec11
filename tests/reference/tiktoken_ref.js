// Reference token ids from the npm package tiktoken (OpenAI's Rust BPE compiled to wasm),
// for tests/data/tiktoken_test.cc.
//
//   node tests/reference/tiktoken_ref.js PACKAGE_DIR INPUT.json > OUTPUT.json
//
// PACKAGE_DIR is node_modules/tiktoken; INPUT.json is {"encodings": [...], "texts": [...]}.
// OUTPUT.json maps each encoding to {"ordinary": [ids per text], "all_special": [ids per
// text], "n_vocab": N}: encode_ordinary(text), and encode(text, "all") with every special
// token recognised.
"use strict";
const fs = require("fs");
const path = require("path");

const [pkgDir, inputPath] = process.argv.slice(2);
if (!pkgDir || !inputPath) {
  console.error("usage: node tiktoken_ref.js PACKAGE_DIR INPUT.json");
  process.exit(2);
}
const { Tiktoken } = require(path.resolve(pkgDir, "lite", "tiktoken.cjs"));
const input = JSON.parse(fs.readFileSync(inputPath, "utf8"));

// o200k_harmony is o200k_base plus GPT-OSS's harmony special tokens (tiktoken's Python
// openai_public.o200k_harmony); the package ships only o200k_base, so add them here.
function harmonySpecials(base) {
  const s = Object.assign({}, base, {
    "<|startoftext|>": 199998, "<|endoftext|>": 199999, "<|reserved_200000|>": 200000,
    "<|reserved_200001|>": 200001, "<|return|>": 200002, "<|constrain|>": 200003,
    "<|reserved_200004|>": 200004, "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007,
    "<|message|>": 200008, "<|reserved_200009|>": 200009, "<|reserved_200010|>": 200010,
    "<|reserved_200011|>": 200011, "<|call|>": 200012,
  });
  for (let i = 200013; i < 201088; i++) s[`<|reserved_${i}|>`] = i;
  return s;
}

const out = {};
for (const name of input.encodings) {
  const file = name === "o200k_harmony" ? "o200k_base" : name;
  const spec = JSON.parse(fs.readFileSync(path.join(pkgDir, "encoders", `${file}.json`), "utf8"));
  const specials = name === "o200k_harmony" ? harmonySpecials(spec.special_tokens) : spec.special_tokens;
  const enc = new Tiktoken(spec.bpe_ranks, specials, spec.pat_str);
  out[name] = {
    ordinary: input.texts.map((t) => Array.from(enc.encode_ordinary(t))),
    all_special: input.texts.map((t) => Array.from(enc.encode(t, "all", []))),
    n_vocab: Math.max(...Object.values(specials)) + 1,
  };
  enc.free();
}
process.stdout.write(JSON.stringify(out));
