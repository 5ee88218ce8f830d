"""A Hugging Face LLaMA directory (config.json, *.safetensors, tokenizer.model) as one GGUF file,
so that llama.cpp runs the same weights as burst (bench/cpu_compare.sh). Tensors keep their
stored dtype (F32, F16 or BF16; norms as float32, as llama.cpp's converter leaves them).

    GGUF_PY=LLAMA_CPP/gguf-py /usr/bin/python3 bench/hf_to_gguf.py MODEL_DIR OUT.gguf

Needs numpy, sentencepiece and llama.cpp's gguf-py (no torch). Q and K rows are reordered from
Hugging Face's rotate-half rotary layout to the interleaved pairs llama.cpp rotates."""
import json, os, struct, sys
import numpy as np

sys.path.insert(0, os.environ.get("GGUF_PY", ""))
try:
    import gguf
    from sentencepiece import SentencePieceProcessor
except ImportError as e:
    sys.exit(f"hf_to_gguf.py: {e} (GGUF_PY=LLAMA_CPP/gguf-py; Debian's python3-numpy, python3-sentencepiece)")

RAW = {"F32": (np.float32, gguf.GGMLQuantizationType.F32), "F16": (np.float16, gguf.GGMLQuantizationType.F16),
       "BF16": (np.uint16, gguf.GGMLQuantizationType.BF16)}
NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
         "lm_head.weight": "output.weight"}
LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def safetensors(path):  # name -> (array over the mapped file, dtype name)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    for name, t in header.items():
        if name != "__metadata__":
            if t["dtype"] not in RAW:
                raise ValueError(f"{path}: {name}: dtype {t['dtype']} (want F32, F16 or BF16)")
            b, e = t["data_offsets"]
            yield name, data[b:e].view(RAW[t["dtype"]][0]).reshape(t["shape"]), t["dtype"]


def interleave(w, heads):  # rows of each head: [x0..x(h/2-1), y0..] -> [x0, y0, x1, y1, ..]
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(name):
    if name in NAMES:
        return NAMES[name]
    parts = name.split(".", 3)
    if len(parts) < 4 or parts[:2] != ["model", "layers"] or parts[3].rsplit(".", 1)[0] not in LAYER:
        raise ValueError(f"{name}: not a LLaMA tensor")
    return f"blk.{parts[2]}.{LAYER[parts[3].rsplit('.', 1)[0]]}.weight"


def main(model_dir, out):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    w = gguf.GGUFWriter(out + ".part", "llama")  # renamed once whole: a broken run leaves no OUT
    w.add_context_length(cfg.get("max_position_embeddings", 4096))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(cfg["hidden_size"] // heads)
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-5))
    w.add_vocab_size(cfg["vocab_size"])

    sp = SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    kind = lambda i: (2 if sp.IsUnknown(i) else 3 if sp.IsControl(i) else 5 if sp.IsUnused(i)  # gguf.TokenType
                      else 6 if sp.IsByte(i) else 1)
    w.add_tokenizer_model("llama")
    w.add_token_list([sp.IdToPiece(i).encode() for i in range(sp.vocab_size())])
    w.add_token_scores([sp.GetScore(i) for i in range(sp.vocab_size())])
    w.add_token_types([kind(i) for i in range(sp.vocab_size())])
    w.add_bos_token_id(cfg.get("bos_token_id", 1))
    w.add_eos_token_id(cfg.get("eos_token_id", 2))
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)

    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    tensors = dict((n, (a, d)) for f in files for n, a, d in safetensors(os.path.join(model_dir, f)))
    if "lm_head.weight" not in tensors:  # tied embeddings
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    for name, (a, dtype) in sorted(tensors.items()):
        if name.endswith("rotary_emb.inv_freq"):
            continue
        if name.endswith("q_proj.weight"):
            a = interleave(a, heads)
        elif name.endswith("k_proj.weight"):
            a = interleave(a, kv_heads)
        if a.ndim == 1 and dtype != "F32":  # norms in float32
            a = a.astype(np.float32) if dtype == "F16" else (a.astype(np.uint32) << 16).view(np.float32)
            dtype = "F32"
        w.add_tensor(gguf_name(name), np.ascontiguousarray(a), raw_dtype=RAW[dtype][1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    os.replace(out + ".part", out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        main(*sys.argv[1:])
    except (OSError, ValueError) as e:
        sys.exit(f"hf_to_gguf.py: {e}")
    except KeyError as e:  # a tensor or config.json key that a LLaMA checkpoint has
        sys.exit(f"hf_to_gguf.py: {sys.argv[1]}: no {e}")
