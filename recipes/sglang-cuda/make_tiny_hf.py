"""Write a random-weight LLaMA in Hugging Face format (no model hub): config.json,
generation_config.json, model.safetensors (bf16, seeded) and a tokenizer built here.

The tokenizer is a byte-level BPE made without training: the 256 byte symbols, then one merge for
every ordered pair of printable ASCII symbols (space included), then `<s>`, `</s>`, `<unk>`,
`<pad>`. Output rows of every token that is not printable ASCII text (the specials, the non-ASCII
bytes, control bytes) are zero, and the logits of the others have a standard deviation of about
`--logit-std`, so the model practically never emits end-of-sequence or partial UTF-8: a request
for N tokens streams exactly N tokens, and greedy decoding is as confident as a trained model's.
Small residual branches (`--residual-scale`) keep kernel rounding from growing layer by layer into
other greedy tokens (see ../tiny-cpu/make_tiny_gguf.py, which this mirrors for llama.cpp).
The embedding and output rows are padded to a vocabulary of 10,240 (zero rows, never emitted), as
real checkpoints pad theirs: SGLang's `bench_one_batch` warms up on random ids below 10,000
whatever prompt it is given, and a smaller vocabulary fails its gather with a device assert.

usage: make_tiny_hf.py --out DIR [--hidden 2048 --layers 16 --ff 5632 --heads 16 --kv-heads 8]
       [--seed 1234 --logit-std 40 --residual-scale 0.05]
"""

import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

SPECIALS = ["<s>", "</s>", "<unk>", "<pad>"]
PADDED_VOCAB = 10240


def byte_symbols():
    """GPT-2's byte-to-unicode table: the symbol byte-level BPE uses for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build_tokenizer():
    sym = byte_symbols()
    vocab = {sym[b]: b for b in range(256)}
    text = [b for b in range(0x20, 0x7F)]  # printable ASCII, space included
    merges = []
    for a in text:
        for b in text:
            pair = (sym[a], sym[b])
            vocab[pair[0] + pair[1]] = len(vocab)
            merges.append(pair)
    for s in SPECIALS:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    printable = {sym[b] for b in text}
    normal = [all(c in printable for c in t) for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    return tok, vocab, normal


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--ff", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--logit-std", type=float, default=40.0)
    ap.add_argument("--residual-scale", type=float, default=0.05)
    a = ap.parse_args()

    tok, vocab, normal = build_tokenizer()
    n_tokens, h, head_dim = len(vocab), a.hidden, a.hidden // a.heads
    n_vocab = max(PADDED_VOCAB, n_tokens)
    g = torch.Generator().manual_seed(a.seed)

    def rand(*shape, std):
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    std = 1.0 / h**0.5
    def padded(rows):
        return torch.cat([rows, torch.zeros(n_vocab - n_tokens, h, dtype=rows.dtype)])

    w = {"model.embed_tokens.weight": padded(rand(n_tokens, h, std=1.0))}
    for i in range(a.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        w[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        w[p + "self_attn.q_proj.weight"] = rand(h, h, std=std)
        w[p + "self_attn.k_proj.weight"] = rand(a.kv_heads * head_dim, h, std=std)
        w[p + "self_attn.v_proj.weight"] = rand(a.kv_heads * head_dim, h, std=std)
        w[p + "self_attn.o_proj.weight"] = rand(h, h, std=std * a.residual_scale)
        w[p + "mlp.gate_proj.weight"] = rand(a.ff, h, std=std)
        w[p + "mlp.up_proj.weight"] = rand(a.ff, h, std=std)
        w[p + "mlp.down_proj.weight"] = rand(h, a.ff, std=a.residual_scale / a.ff**0.5)
    w["model.norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    head = rand(n_tokens, h, std=a.logit_std / h**0.5)
    head[~torch.tensor(normal)] = 0
    w["lm_head.weight"] = padded(head)

    tmp = a.out.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_file(w, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": a.ff,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": a.ctx,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": n_vocab,
        "bos_token_id": vocab["<s>"],
        "eos_token_id": vocab["</s>"],
        "pad_token_id": vocab["<pad>"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"]}, f)
    tok.save(os.path.join(tmp, "tokenizer.json"))
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": a.ctx,
        "add_bos_token": False,
        "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}",
    }
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, indent=2)
    if os.path.exists(a.out):
        # Replace only a model this script wrote; never a directory it did not make.
        if not os.path.isfile(os.path.join(a.out, "model.safetensors")):
            sys.exit(f"{a.out} exists and is not a model this script wrote: move it away")
        shutil.rmtree(a.out)
    os.replace(tmp, a.out)
    params = sum(t.numel() for t in w.values())
    print(f"wrote {a.out}: {params / 1e6:.1f}M parameters, vocab {n_tokens} tokens in {n_vocab} rows, seed {a.seed}")


if __name__ == "__main__":
    main()
