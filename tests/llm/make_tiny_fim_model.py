"""Write a tiny llama-architecture GGUF with a real FIM tokenizer.

The weights are seeded random numbers, so the model's text is gibberish, but it
is the same on every run and every machine, and llama.cpp treats the model as a
real one: it tokenizes with StarCoder's tokenizer (copied KV by KV from the
vocab-only ``ggml-vocab-starcoder.gguf`` that the llama-cpp-python sdist ships),
finds the FIM tokens ``<fim_prefix>``/``<fim_suffix>``/``<fim_middle>`` and so
serves ``/infill``.

The output matrix's rows of control tokens (``<|endoftext|>``, ``<fim_*>``, ...)
are zero, so greedy decoding never picks them: a generation always runs to
``n_predict`` tokens instead of stopping at a random EOS. The two big matrices
are f16 to keep the file small (~13 MB).

Run by ``.ci/llama-server.sh``::

    python make_tiny_fim_model.py --gguf-py SDIST/vendor/llama.cpp/gguf-py \\
        --vocab SDIST/vendor/llama.cpp/models/ggml-vocab-starcoder.gguf --out tiny-fim.gguf

Needs numpy and pyyaml (gguf-py imports yaml).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

SEED = 20240531
N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_CTX_TRAIN = 4096
ROPE_FREQ_BASE = 10000.0
RMS_EPS = 1e-5
FIM_TOKENS = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf-py", type=Path, required=True, help="the sdist's gguf-py dir")
    ap.add_argument("--vocab", type=Path, required=True, help="vocab-only GGUF with FIM tokens")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    sys.path.insert(0, str(args.gguf_py))
    import gguf  # type: ignore[import-not-found]
    import numpy as np

    reader = gguf.GGUFReader(args.vocab)
    tok_fields = {k: f for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    tokens: list[str] = tok_fields["tokenizer.ggml.tokens"].contents()
    token_types: list[int] = tok_fields["tokenizer.ggml.token_type"].contents()
    missing = [t for t in FIM_TOKENS if t not in tokens]
    if missing:
        raise SystemExit(f"{args.vocab} has no FIM tokens {missing}")
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("anyfill-tiny-fim")
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(ROPE_FREQ_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    # Every tokenizer KV of the vocab file, with its exact GGUF type.
    for key, field in tok_fields.items():
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value: Any = field.contents()
        w.add_key_value(key, value, vtype, sub)

    rng = np.random.default_rng(SEED)

    def rand(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.5 / np.sqrt(shape[-1])).astype(np.float32)

    control = np.array([t == gguf.TokenType.CONTROL for t in token_types])
    w.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, N_EMBD)).astype(np.float16))
    # Untied output: a tied one makes a random model repeat its last token forever.
    output = rng.standard_normal((n_vocab, N_EMBD)).astype(np.float16)
    output[control] = 0.0  # control tokens get logit 0, never the argmax
    w.add_tensor("output.weight", output)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    head_dim = N_EMBD // N_HEAD
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_k.weight", rand(N_HEAD_KV * head_dim, N_EMBD))
        w.add_tensor(p + "attn_v.weight", rand(N_HEAD_KV * head_dim, N_EMBD))
        w.add_tensor(p + "attn_output.weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", rand(N_EMBD, N_FF))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    fim = {t: tokens.index(t) for t in FIM_TOKENS}
    print(f"wrote {args.out}: vocab {n_vocab}, {N_LAYER} layers x {N_EMBD} dim, FIM ids {fim}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
