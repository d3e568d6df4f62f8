"""Writes the GGUF model as a float32 Hugging Face directory for lm-eval's `hf` model.

usage: python convert_gguf.py GGUF_FILE OUT_DIR

transformers dequantises Q4_1 / Q8_0 to float32 (shared/golden/smollm2-135m/README.md). The
tokenizer adds no BOS (GGUF add_bos_token = False); this is checked after the reload.
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    gguf_path, out = sys.argv[1], sys.argv[2]
    d, f = os.path.split(os.path.abspath(gguf_path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    os.makedirs(out, exist_ok=True)
    # The weights are already dequantised float32; drop the GGUF "quantizer" so that
    # save_pretrained writes them (transformers 5 refuses to serialise a GGUF-loaded model).
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tok.save_pretrained(out)
    # Make the no-BOS behaviour explicit for every loader.
    tc_path = os.path.join(out, "tokenizer_config.json")
    tc = json.load(open(tc_path))
    tc["add_bos_token"] = False
    json.dump(tc, open(tc_path, "w"), indent=2, ensure_ascii=False)

    # Check: the reloaded directory gives the same tokens and logits as the GGUF.
    tok2 = AutoTokenizer.from_pretrained(out)
    model2 = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    model2.eval()
    text = "Question: The tower is 324 metres tall, about the same height as an 81-storey building.\nAnswer: yes"
    ids = tok(text).input_ids
    assert tok2(text).input_ids == ids, "tokenizer differs after reload"
    assert ids[0] != tok.bos_token_id, "a BOS was added"
    with torch.no_grad():
        a = model(torch.tensor([ids])).logits
        b = model2(torch.tensor([ids])).logits
    diff = (a - b).abs().max().item()
    assert diff == 0.0, f"logits differ after reload: {diff}"
    print(f"wrote {out}: {sum(p.numel() for p in model2.parameters())} parameters, dtype "
          f"{next(model2.parameters()).dtype}, first ids {ids[:6]}, reload max |dlogit| {diff}")


if __name__ == "__main__":
    main()
