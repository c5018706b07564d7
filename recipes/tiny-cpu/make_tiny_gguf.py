"""Write a tiny LLaMA-architecture GGUF with seeded random weights (no model hub).

The tokenizer (32000-token LLaMA SentencePiece vocabulary) is copied from llama.cpp's own
`models/ggml-vocab-llama-spm.gguf`. Output rows of every non-normal token (unknown, control,
byte-fallback) are zero and the logits of normal tokens have a standard deviation of about 4, so
the model practically never emits end-of-sequence or partial UTF-8: a request for N tokens
streams exactly N tokens.

usage: make_tiny_gguf.py --vocab VOCAB.gguf --out MODEL.gguf [--embd 256 --layers 4 --ff 768 --heads 4]
       [--seed 1234 --logit-std 4.0 --residual-scale 1.0]
"""

import argparse
import os

import numpy as np
from gguf import GGUFReader, GGUFWriter

NORMAL = 1


def read_vocab(path):
    reader = GGUFReader(path)

    def field(name):
        f = reader.fields[name]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(p).decode("utf-8") for p in field("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in field("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in field("tokenizer.ggml.token_type")]
    return tokens, scores, types


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ff", type=int, default=768)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    # Standard deviation of the logits. Random weights give flat distributions with near-ties
    # between the top tokens, which any change of kernel numerics flips; a larger spread makes
    # the model as confident as trained ones are, so greedy A/B compares kernels, not ties.
    ap.add_argument("--logit-std", type=float, default=4.0)
    # Scale of the residual branches' output projections. At 1.0 a deep random network is chaotic:
    # a rounding difference between two kernels grows layer by layer until greedy tokens differ. A
    # small scale keeps the residual stream near the token embedding, as trained models are stable.
    ap.add_argument("--residual-scale", type=float, default=1.0)
    a = ap.parse_args()

    tokens, scores, types = read_vocab(a.vocab)
    n_vocab, n_embd = len(tokens), a.embd
    rng = np.random.default_rng(a.seed)

    def rand(*shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float16)

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".partial"
    w = GGUFWriter(tmp, "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(a.ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.heads)
    w.add_rope_dimension_count(n_embd // a.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)  # mostly F16
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )

    std = 1.0 / np.sqrt(n_embd)
    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd, std=1.0))
    for i in range(a.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v"):
            w.add_tensor(p + name + ".weight", rand(n_embd, n_embd, std=std))
        w.add_tensor(p + "attn_output.weight", rand(n_embd, n_embd, std=std * a.residual_scale))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(a.ff, n_embd, std=std))
        w.add_tensor(p + "ffn_up.weight", rand(a.ff, n_embd, std=std))
        w.add_tensor(
            p + "ffn_down.weight", rand(n_embd, a.ff, std=a.residual_scale / np.sqrt(a.ff))
        )
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    out = rand(n_vocab, n_embd, std=a.logit_std / np.sqrt(n_embd))
    out[np.array(types) != NORMAL, :] = 0
    w.add_tensor("output.weight", out)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, a.out)
    params = n_vocab * n_embd * 2 + a.layers * (4 * n_embd * n_embd + 3 * n_embd * a.ff)
    print(f"wrote {a.out}: {params / 1e6:.1f}M parameters, vocab {n_vocab}, seed {a.seed}")


if __name__ == "__main__":
    main()
