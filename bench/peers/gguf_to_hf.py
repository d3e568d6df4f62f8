#!/usr/bin/env python3
"""A GGUF file as a Hugging Face model directory (fp32 safetensors + tokenizer), for the official
implementations, which read HF directories only.

    python bench/peers/gguf_to_hf.py MODEL.gguf OUT_DIR

transformers dequantizes the GGUF tensors (Q4_1 etc.) to fp32 and un-permutes q/k as llama.cpp's
converter permuted them, so the directory holds the same model sinkq runs from the GGUF file
(`sinkq -m MODEL.gguf` dequantizes at load too). bench/peers/check_same_model.py verifies it.
"""
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    gguf, out = sys.argv[1:]
    d, f = os.path.split(os.path.abspath(gguf))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    # transformers marks a GGUF-loaded model as "quantized with gguf" and refuses to save it; its
    # tensors are already fp32, so a plain model of the same config takes them.
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    plain = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    model = plain
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    open(os.path.join(out, "READY"), "w").write(gguf + "\n")
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"tied={model.config.tie_word_embeddings}")


if __name__ == "__main__":
    main()
