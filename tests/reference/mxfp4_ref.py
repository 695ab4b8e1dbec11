#!/usr/bin/env python3
"""Independent MXFP4 dequantizer (numpy), for Kiln's MXFP4 import test.

Follows the GPT-OSS release format (spec section 1.8) the way Hugging Face's loader reads it:
blocks uint8 [..., R, G, 16] hold two FP4 (E2M1) codes per byte, the low nibble first;
scales uint8 [..., R, G] are E8M0 exponents biased by 127, one per 32-value block; the
result [..., R, G*32] is transposed over its last two dimensions to [..., G*32, R].

Usage: mxfp4_ref.py IN.safetensors OUT.safetensors
IN holds <name>_blocks and <name>_scales pairs (U8); OUT gets <name> as F32.
"""
import json
import struct
import sys

import numpy as np

FP4_VALUES = np.array([+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "U8", name
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=np.uint8).reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def dequantize(blocks, scales):
    lo = FP4_VALUES[blocks & 0x0F]                      # element 2m
    hi = FP4_VALUES[blocks >> 4]                        # element 2m + 1
    values = np.stack([lo, hi], axis=-1)                # [..., R, G, 16, 2]
    values = values.reshape(*blocks.shape[:-1], 32)     # [..., R, G, 32]
    values = values * np.exp2(scales.astype(np.float64) - 127.0)[..., None]
    values = values.reshape(*blocks.shape[:-2], -1)     # [..., R, G*32]
    return np.swapaxes(values, -1, -2)                  # [..., G*32, R]


def main():
    tensors = read_safetensors(sys.argv[1])
    out = {}
    for name in tensors:
        if name.endswith("_blocks"):
            base = name[:-len("_blocks")]
            out[base] = dequantize(tensors[name], tensors[base + "_scales"])
    write_safetensors(sys.argv[2], out)


if __name__ == "__main__":
    main()
