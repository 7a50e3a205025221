#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into <out>/<target>/ (the committed fuzz/seeds is this script's output;
`make fuzz` copies it into the build's working corpora). Seeds are small valid inputs taken from the test fixtures
(tests/golden configs and tokenizer fixtures, configs/*.json) or built here in the formats' own layout, so that the
fuzzers start from inputs the parsers accept. Usage: python3 fuzz/make_seeds.py <out> (default fuzz/seeds)."""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, raw bytes), packed in order."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "fuzz", "seeds")
    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    # safetensors: each dtype the reader takes, metadata, a zero-size tensor, an unaligned (copied) tensor.
    write(out, "safetensors", "f32_bf16", safetensors([("a", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6)),
                                                       ("b", "BF16", [2], b"\x80\x3f\x00\x40")], {"format": "pt"}))
    write(out, "safetensors", "f16_i64_i32", safetensors([("h", "F16", [1, 2], b"\x00\x3c\x00\x40"),
                                                          ("i", "I64", [1], struct.pack("<q", -5)),
                                                          ("j", "I32", [2], struct.pack("<2i", 7, 8))]))
    write(out, "safetensors", "empty_and_scalar", safetensors([("e", "F32", [0, 4], b""), ("s", "F32", [], f32(2.5))]))
    write(out, "safetensors", "unaligned", safetensors([("c", "BF16", [1], b"\x80\x3f"), ("d", "F32", [1], f32(3))]))
    write(out, "safetensors", "no_tensors", safetensors([], {"k": "v"}))
    # checkpoint_index: the fuzz target's fixed shards a.safetensors {x, y} and b.safetensors {z}.
    write(out, "checkpoint_index", "two_shards", json.dumps(
        {"metadata": {"total_size": 44}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}}))
    write(out, "checkpoint_index", "missing_z", json.dumps({"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}}))
    # hf_config: the golden models' config.json files (every architecture), plus a qwen3_hybrid student's.
    golden = os.path.join(ROOT, "tests", "golden")
    for name in sorted(os.listdir(golden)):
        path = os.path.join(golden, name, "config.json")
        if os.path.isfile(path):
            write(out, "hf_config", name + ".json", open(path, "rb").read())
    olmo = json.load(open(os.path.join(golden, "olmo_hybrid_tiny", "config.json")))
    student = dict(olmo, model_type="qwen3_hybrid", architectures=["Qwen3HybridForCausalLM"], head_dim=16)
    write(out, "hf_config", "qwen3_hybrid.json", json.dumps(student, indent=1))
    # tokenizer_json: the two fixtures (the real files are megabytes; tokenizer_encode loads those).
    fixtures = os.path.join(golden, "tokenizer", "fixtures")
    for name in sorted(os.listdir(fixtures)):
        write(out, "tokenizer_json", name, open(os.path.join(fixtures, name), "rb").read())
    # tokenizer_encode: the golden texts (selector byte cycling over the tokenizers) and a few hard strings.
    texts = [json.loads(line)["text"] for line in open(os.path.join(golden, "tokenizer", "texts.jsonl"), encoding="utf-8")]
    for i, text in enumerate(texts[:24]):
        write(out, "tokenizer_encode", "text%02d" % i, bytes([i % 7]) + text.encode("utf-8"))
    for i, raw in enumerate([b"\xff\xfe", b"a\xc3", "e\u0301\u200d\U0001F600 <|endoftext|>".encode(), b"\x00\x01 \t\r\n"]):
        write(out, "tokenizer_encode", "hard%d" % i, bytes([i]) + raw)
    # corpus: mode byte 0 = corpus.json, 1 = raw .jsonl.zst (a real zstd frame: skippable-free, level 1), 2 = JSONL.
    meta = {"format": "hybridlm-corpus", "version": 1, "languages": [
        {"code": "fra_Latn", "file": "fra_Latn.jsonl.zst", "tier": "high", "documents": 2, "bytes": 8}]}
    write(out, "corpus", "meta", b"\x00" + json.dumps(meta).encode())
    write(out, "corpus", "jsonl", b"\x02" + '{"text": "Bonjour."}\n{"text": "\\u00e9t\\u00e9"}\n{"text": ""}\n'.encode())
    # A zstd frame of one line, written without the zstd module: a raw (uncompressed) block.
    line = b'{"text": "Salut"}\n{"text": "x"}\n'
    frame = b"\x28\xb5\x2f\xfd" + bytes([0x20, len(line)]) + struct.pack("<I", (len(line) << 3) | 1)[:3] + line
    write(out, "corpus", "raw_frame", b"\x01" + frame)
    # parallel_set: plain and compressed forms of a small aligned set.
    units = [{"id": "u0", "eng_Latn": "Hello.", "fra_Latn": "Bonjour."}, {"id": "u1", "eng_Latn": "Yes", "deu_Latn": "Ja"},
             {"id": "u2", "fra_Latn": "\u00e9t\u00e9", "eng_Latn": "summer"}]
    body = "\n".join(json.dumps(u, ensure_ascii=False) for u in units) + "\n\n"
    write(out, "parallel_set", "plain", b"\x00" + body.encode())
    write(out, "parallel_set", "zst", b"\x01" + body.encode())
    # study_config: the shipped configs.
    for name in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        if name.endswith(".json"):
            write(out, "study_config", name, open(os.path.join(ROOT, "configs", name), "rb").read())
    write(out, "study_config", "placements.json", json.dumps(
        {"placements": {"names": ["standard_periodic", "0,4,8"], "full": 3}, "compare": {"exclude": ["eng_Latn"]}}))
    # train_config: a pretrain and a distill config as checkpoints hold them (job byte 0 / 1).
    pre = {"format": "hybridlm-train-config", "version": 1, "job": "pretrain", "tokens": 4096, "seq_len": 64,
           "batch_rows": 4, "micro_batch_rows": 2, "lr": 0.001, "warmup_fraction": 0.1, "clip": 1.0}
    dis = {"format": "hybridlm-train-config", "version": 1, "job": "distill", "tokens": 100000, "seq_len": 128,
           "batch_rows": 8, "micro_batch_rows": 8, "lr_rec": 0.001, "lr_rest": 1e-05, "tau": 1.0, "warmup_steps": 3}
    write(out, "train_config", "pretrain", b"\x00" + json.dumps(pre).encode())
    write(out, "train_config", "distill", b"\x01" + json.dumps(dis).encode())
    # the same with several passes over the corpus (session 16's `passes` key)
    write(out, "train_config", "pretrain_passes", b"\x00" + json.dumps(dict(pre, passes=3)).encode())
    write(out, "train_config", "distill_passes", b"\x01" + json.dumps(dict(dis, passes=2, packing="continuous")).encode())
    write(out, "study_config", "passes.json", json.dumps(
        {"pretrain": {"tokens": 8192, "passes": 4}, "distill": {"passes": 2},
         "replicates": {"data_seeds": [0, 1], "placements": ["standard_periodic"]}}))


if __name__ == "__main__":
    main()
