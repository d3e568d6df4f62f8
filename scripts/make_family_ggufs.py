#!/usr/bin/env python3
"""Write tests/data/families/<family>/model.gguf for six of the family fixtures, as llama.cpp's
converter (convert_hf_to_gguf.py --outtype f16) would write them, minus the vocabulary.

    /work/refenv/venv/bin/python scripts/make_family_ggufs.py [--only NAME...] [--no-verify]

Needs only numpy and the `gguf` package (gguf-py, llama.cpp's own Python library; made with 0.19.0).
Everything that names or lays out the GGUF comes from gguf-py's own tables, not from sinkq:
- tensor names: gguf.get_tensor_name_map(arch, n_blocks).get_name(hf_name, try_suffixes=(".weight", ".bias"));
- keys: gguf.GGUFWriter's add_* methods; general.name / general.size_label: gguf.Metadata.load and
  gguf.size_label, as the converter's prepare_metadata does;
- safetensors reading: gguf.utility.SafetensorsLocal (the converter's own reader, same tensor order);
- F16 / F32: gguf.quants.quantize.

The converter followed is llama.cpp commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f (2026-10-01), where
convert_hf_to_gguf.py is a thin driver and the model classes live in conversion/*.py. Its per-family
set_gguf_parameters / modify_tensors / generate_extra_tensors are re-implemented below (the converter
itself needs torch + transformers and is not part of this repository); every step names the
converter file and line it reproduces. See tests/data/families/GGUF.md.

What is not like the real converter: no tokenizer.* keys at all (set_vocab is skipped: the fixtures
have no tokenizer), and Gemma 3's token_embd is not trimmed to the tokenizer's size (there is no
tokenizer; all vocab_size = 96 rows are kept).

After writing, every file is read back with gguf.GGUFReader: its keys and tensors are printed, and each
tensor, with the transform undone (Llama q/k permutation, Gemma "+1"), must equal the safetensors
tensor rounded to fp16 (F16 tensors) or exactly (F32 tensors).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf.utility import SafetensorsLocal

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "families"
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

# family folder -> (HF architecture, gguf arch). The converter picks the class by architectures[0]:
# LlamaModel (conversion/llama.py:17-33), Qwen2Model (qwen.py:48-57), Qwen3Model (qwen.py:159-161),
# Gemma2Model (gemma.py:73-76), Gemma3Model (gemma.py:125-128), Phi3MiniModel (phi.py:39-41).
FAMILIES: dict[str, tuple[str, gguf.MODEL_ARCH]] = {
    "qwen3": ("Qwen3ForCausalLM", gguf.MODEL_ARCH.QWEN3),
    "gemma2": ("Gemma2ForCausalLM", gguf.MODEL_ARCH.GEMMA2),
    "gemma3": ("Gemma3ForCausalLM", gguf.MODEL_ARCH.GEMMA3),
    "phi3": ("Phi3ForCausalLM", gguf.MODEL_ARCH.PHI3),
    "llama3": ("LlamaForCausalLM", gguf.MODEL_ARCH.LLAMA),
    "qwen2": ("Qwen2ForCausalLM", gguf.MODEL_ARCH.QWEN2),
}

FTYPE = gguf.LlamaFileType.MOSTLY_F16  # --outtype f16


# ----------------------------------------------------------------------------------------------
# hparams (conversion/base.py TextModel.__init__, lines 1345-1378)
# ----------------------------------------------------------------------------------------------

def find_hparam(hp: dict, keys: list[str], optional: bool = False):
    """ModelBase.find_hparam (base.py:211-217): the first of `keys` present."""
    for k in keys:
        if k in hp:
            return hp[k]
    if optional:
        return None
    raise KeyError(f"could not find any of: {keys}")


def load_hparams(d: Path) -> tuple[dict, dict]:
    """config.json and the converter's rope_parameters view of it.

    The converter loads AutoConfig.from_pretrained(dir).to_dict() (base.py:1271-1306); for these six
    fixtures that equals config.json on every key the converter reads (checked with transformers
    5.24.0: it only adds id2label, return_dict, _name_or_path, ...), so config.json is read directly.
    """
    hp = json.loads((d / "config.json").read_text())
    rp = dict(hp.get("rope_parameters", hp.get("rope_scaling")) or {})  # base.py:1360
    # base.py:1362-1378: mirror global rope keys into rope_parameters (nothing to do when it is per layer type)
    if "full_attention" not in rp and "sliding_attention" not in rp:
        rope_theta = find_hparam(hp, ["global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta",
                                      "rotary_emb_base"], optional=True)
        local_theta = find_hparam(hp, ["local_rope_theta", "rope_local_theta", "rope_theta_local", "swa_rope_theta",
                                       "rope_local_base_freq"], optional=True)
        partial = find_hparam(hp, ["partial_rotary_factor", "rope_pct", "rope_percent"], optional=True)
        orig_ctx = find_hparam(hp, ["original_max_position_embeddings"], optional=True)
        if local_theta is not None:
            rp["sliding_attention"] = {"rope_theta": local_theta}
        if "rope_theta" not in rp and rope_theta is not None:
            rp["rope_theta"] = rope_theta
        if "rope_type" not in rp and (t := rp.get("type")) is not None:
            rp["rope_type"] = t
        if "partial_rotary_factor" not in rp and partial is not None:
            rp["partial_rotary_factor"] = partial
        if "original_max_position_embeddings" not in rp and orig_ctx is not None:
            rp["original_max_position_embeddings"] = orig_ctx
    return hp, rp


# ----------------------------------------------------------------------------------------------
# metadata: set_gguf_parameters per class
# ----------------------------------------------------------------------------------------------

def text_model_params(w: gguf.GGUFWriter, hp: dict, rp: dict, n_blocks: int) -> None:
    """TextModel.set_gguf_parameters (base.py:1434-1546), the branches these configs reach."""
    w.add_block_count(n_blocks)
    if (n_ctx := find_hparam(hp, ["max_position_embeddings", "n_ctx", "n_positions", "max_length",
                                  "max_sequence_length", "model_max_length"], optional=True)) is not None:
        w.add_context_length(n_ctx)
    if (n_embd := find_hparam(hp, ["hidden_size", "n_embd", "dim"], optional=True)) is not None:
        w.add_embedding_length(n_embd)
    if (n_ff := find_hparam(hp, ["prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size",
                                 "n_inner", "hidden_dim"], optional=True)) is not None:
        w.add_feed_forward_length(n_ff)
    if (n_head := find_hparam(hp, ["num_attention_heads", "n_head", "n_heads"], optional=True)) is not None:
        w.add_head_count(n_head)
    if (n_head_kv := find_hparam(hp, ["num_key_value_heads", "n_kv_heads"], optional=True)) is not None:
        w.add_head_count_kv(n_head_kv)
    if hp.get("is_causal") is False:
        w.add_causal_attention(False)
    # base.py:1466-1500: RoPE scaling of the global layers. Only "linear" writes keys here; "llama3"
    # is a rope_freqs tensor (generate_extra_tensors), "default" writes nothing (the converter logs
    # "Unknown RoPE type: default"). yarn / longrope do not occur in these fixtures.
    rope_params = rp.get("full_attention", rp)
    if (rope_type := rope_params.get("rope_type")) is not None:
        factor = rope_params.get("factor")
        if rope_type == "linear" and factor is not None:
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(factor)
        elif rope_type not in ("default", "llama3"):
            raise NotImplementedError(f"rope_type {rope_type!r}: not reproduced by this script")
    if "mrope_section" in rp:
        raise NotImplementedError("mrope_section: not reproduced by this script")
    if (theta := rope_params.get("rope_theta")) is not None:  # base.py:1510-1512
        w.add_rope_freq_base(theta)
    if (local_theta := rp.get("sliding_attention", {}).get("rope_theta")) is not None:  # base.py:1513-1515
        w.add_rope_freq_base_swa(local_theta)
    if (eps := find_hparam(hp, ["rms_norm_eps", "norm_eps"], optional=True)) is not None:
        w.add_layer_norm_rms_eps(eps)
    if (eps := find_hparam(hp, ["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"], optional=True)) is not None:
        w.add_layer_norm_eps(eps)
    if find_hparam(hp, ["num_local_experts", "num_experts", "n_routed_experts"], optional=True) is not None:
        raise NotImplementedError("experts: not reproduced by this script")
    if (head_dim := hp.get("head_dim")) is not None:  # base.py:1541-1543
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(FTYPE)


def params_llama(w, hp, rp, n_blocks):
    """LlamaModel.set_gguf_parameters (llama.py:164-173)."""
    text_model_params(w, hp, rp, n_blocks)
    w.add_vocab_size(hp["vocab_size"])
    rope_dim = hp.get("head_dim")
    if rope_dim is None:
        rope_dim = hp["hidden_size"] // hp["num_attention_heads"]
    w.add_rope_dimension_count(rope_dim)


def params_qwen2(w, hp, rp, n_blocks):
    """Qwen2Model.set_gguf_parameters (qwen.py:66-68): TextModel's, then _try_set_pooling_type
    (base.py:2295-2333), which writes nothing without modules.json / classifier_pooling."""
    text_model_params(w, hp, rp, n_blocks)
    if "classifier_pooling" in hp:
        raise NotImplementedError("classifier_pooling: not reproduced by this script")


def params_qwen3(w, hp, rp, n_blocks):
    """Qwen3Model.set_gguf_parameters (qwen.py:223-233): Qwen2's; the rerank keys only for rerankers."""
    params_qwen2(w, hp, rp, n_blocks)


def params_gemma2(w, hp, rp, n_blocks):
    """Gemma2Model.set_gguf_parameters (gemma.py:84-103). It does not call TextModel's: no RoPE keys
    at all (llama.cpp's default freq_base 10000 applies) and no query_pre_attn_scalar."""
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_block_count(n_blocks)
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(hp["num_key_value_heads"] if "num_key_value_heads" in hp else hp["num_attention_heads"])
    w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    w.add_key_length(hp["head_dim"])
    w.add_value_length(hp["head_dim"])
    w.add_file_type(FTYPE)
    w.add_attn_logit_softcapping(hp["attn_logit_softcapping"])
    w.add_final_logit_softcapping(hp["final_logit_softcapping"])
    w.add_sliding_window(hp["sliding_window"])


def params_gemma3(w, hp, rp, n_blocks):
    """Gemma3Model.set_gguf_parameters (gemma.py:141-158): TextModel's, then it re-adds context
    length, head count, rms eps, key/value length, rope freq base (global layers) and head_count_kv.
    GGUFWriter overwrites a duplicated key in place (logging a warning); with these hparams every
    re-added value equals the first one, so writing each key once gives the same file. No sliding
    window pattern key: llama.cpp assumes 5 sliding : 1 global."""
    text_model_params(w, hp, rp, n_blocks)
    for key, val in (("context_length", hp.get("max_position_embeddings", 131072)),
                     ("attention.head_count", hp.get("num_attention_heads", 8)),
                     ("attention.key_length", hp.get("head_dim", 256)),
                     ("attention.value_length", hp.get("head_dim", 256)),
                     ("attention.head_count_kv", hp.get("num_key_value_heads", 4)),
                     ("attention.layer_norm_rms_epsilon", hp.get("rms_norm_eps", 1e-6)),
                     ("rope.freq_base", rp.get("full_attention", rp).get("rope_theta", 1_000_000.0))):
        written = w.kv_data[0][f"{w.arch}.{key}"].value
        assert math.isclose(written, val, rel_tol=1e-7), (key, written, val)
    assert hp.get("attn_logit_softcapping") is None  # gemma.py:152
    if (cap := hp.get("final_logit_softcapping")):   # gemma.py:153-154
        w.add_final_logit_softcapping(cap)
    if hp.get("sliding_window_pattern") != 1:        # gemma.py:156-157 (config.json has only "_sliding_window_pattern")
        w.add_sliding_window(hp["sliding_window"])


def params_phi3(w, hp, rp, n_blocks):
    """Phi3MiniModel.set_gguf_parameters (phi.py:148-173). No key/value length; the original
    context length is written although there is no RoPE scaling."""
    n_embd = find_hparam(hp, ["hidden_size", "n_embd"])
    n_head = find_hparam(hp, ["num_attention_heads", "n_head"])
    n_head_kv = find_hparam(hp, ["num_key_value_heads", "n_head_kv"])
    rms_eps = find_hparam(hp, ["rms_norm_eps"])
    max_pos = find_hparam(hp, ["n_positions", "max_position_embeddings"])
    orig_max_pos = rp["original_max_position_embeddings"]
    rot_pct = rp.get("partial_rotary_factor", 1.0)
    rope_dims = int(rot_pct * n_embd) // n_head
    w.add_context_length(max_pos)
    w.add_rope_scaling_orig_ctx_len(orig_max_pos)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(find_hparam(hp, ["intermediate_size"]))
    w.add_block_count(n_blocks)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_rope_dimension_count(rope_dims)
    w.add_rope_freq_base(rp.get("full_attention", rp)["rope_theta"])
    w.add_file_type(FTYPE)
    sw = hp.get("sliding_window")
    w.add_sliding_window(0 if sw is None else sw)  # phi.py:169-173: 0 marks Phi-4
    if rp.get("long_factor"):  # phi.py:175-211: rope_factors_long/short tensors
        raise NotImplementedError("longrope factors: not reproduced by this script")


PARAMS = {"qwen3": params_qwen3, "gemma2": params_gemma2, "gemma3": params_gemma3, "phi3": params_phi3,
          "llama3": params_llama, "qwen2": params_qwen2}


# ----------------------------------------------------------------------------------------------
# tensors: generate_extra_tensors + modify_tensors per class
# ----------------------------------------------------------------------------------------------

def llama_permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """LlamaModel.permute (llama.py:175-181): within each head, rows (i, i + d/2) -> (2i, 2i + 1)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def llama_unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of llama_permute with the head count it actually used (verification only)."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def llama3_rope_freqs(hp: dict, rp: dict) -> np.ndarray | None:
    """LlamaModel.generate_extra_tensors (llama.py:298-326): the llama3 RoPE factors as the F32
    tensor rope_freqs.weight (head_dim / 2 values), computed in float32 like torch does there."""
    rope_params = rp.get("full_attention", rp)
    if not rope_params or rope_params.get("rope_type", "").lower() != "llama3":
        return None
    base = rope_params.get("rope_theta", 10000.0)
    dim = hp.get("head_dim")
    if dim is None:
        dim = hp["hidden_size"] // hp["num_attention_heads"]
    # torch: 1.0 / (base ** (arange(0, dim, 2, float32) / dim)), all in float32
    exps = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    freqs = (np.float32(1.0) / (np.float32(base) ** exps).astype(np.float32)).astype(np.float32)
    factor = rope_params.get("factor", 8.0)
    low = rope_params.get("low_freq_factor", 1.0)
    high = rope_params.get("high_freq_factor", 4.0)
    old_ctx = rope_params.get("original_max_position_embeddings", 8192)
    low_wavelen = old_ctx / low
    high_wavelen = old_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / float(f)
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def modify(family: str, hf_name: str, data: np.ndarray, hp: dict) -> np.ndarray:
    """The per-class modify_tensors value transforms (names are mapped separately)."""
    if family == "llama3":
        # LlamaModel.modify_tensors (llama.py:257-264): undo_permute = True for q and k (weights and biases)
        n_head = find_hparam(hp, ["n_heads", "num_attention_heads"])
        n_kv = find_hparam(hp, ["n_kv_heads", "num_key_value_heads"])
        if hf_name.endswith(("q_proj.weight", "q_proj.bias")):
            data = llama_permute(data, n_head, n_head)
        if hf_name.endswith(("k_proj.weight", "k_proj.bias")):
            data = llama_permute(data, n_head, n_kv)
    elif family == "gemma2":
        # Gemma2Model.modify_tensors (gemma.py:117-122): every "...norm.weight" + 1 (input_layernorm,
        # post_attention_layernorm, pre/post_feedforward_layernorm, model.norm)
        if hf_name.endswith("norm.weight"):
            data = data + np.float32(1)
    elif family == "gemma3":
        # Gemma3Model.modify_tensors (gemma.py:160-180) with norm_shift (gemma.py:131-132): the same
        # "+1" rule, which here also covers self_attn.q_norm / k_norm. The token_embd trim to the
        # tokenizer's size (gemma.py:162-171) is skipped: no tokenizer (all 96 rows kept).
        if hf_name.endswith("norm.weight"):
            data = data + np.float32(1)
    # qwen2 / qwen3 / phi3: no value transform (Qwen2Model.modify_tensors qwen.py:70-73 only renames
    # bare Qwen2Model checkpoints; Phi3MiniModel uses ModelBase.modify_tensors, base.py:685-744, which
    # maps names only: qkv_proj -> attn_qkv, gate_up_proj -> ffn_up, both kept fused).
    return data


def skip_tensor(family: str, hf_name: str) -> bool:
    """filter_tensors and prepare_tensors' skip list (base.py:590-599, 1387-1401, 1058-1060)."""
    if family == "gemma2" and hf_name == "lm_head.weight":  # gemma.py:105-115
        return True
    return hf_name.endswith((".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq"))


def qtype_for(gguf_name: str, data: np.ndarray) -> gguf.GGMLQuantizationType:
    """prepare_tensors (base.py:1080-1158) under --outtype f16: 1-D tensors and "*_norm.weight" are
    F32; every other ".weight" (token_embd and output included) F16."""
    if data.ndim <= 1 or gguf_name.endswith("_norm.weight"):
        return gguf.GGMLQuantizationType.F32
    if gguf_name[-7:] not in (".weight", ".lora_a", ".lora_b"):
        return gguf.GGMLQuantizationType.F32
    return gguf.GGMLQuantizationType.F16


# ----------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------

def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors, in the order the converter visits them: gguf-py's SafetensorsLocal (as
    ModelBase.index_tensors, base.py:219-308), which sorts them by name."""
    out = {}
    with SafetensorsLocal(path) as st:  # a dict name -> LocalTensor, sorted by name
        for name, t in st.items():
            assert t.dtype == "F32", (path, name, t.dtype)
            out[name] = np.frombuffer(t.mmap_bytes(), dtype="<f4").reshape(t.shape).copy()
    return out


def write_family(family: str, out_path: Path) -> list[str]:
    d = FIXTURES / family
    hf_arch, arch = FAMILIES[family]
    hp, rp = load_hparams(d)
    assert hp["architectures"][0] == hf_arch, (family, hp["architectures"])
    n_blocks = find_hparam(hp, ["n_layers", "num_hidden_layers", "n_layer", "num_layers"])
    tmap = gguf.get_tensor_name_map(arch, n_blocks)

    # GGUFWriter(path=None, arch=...) (base.py:199) writes general.architecture first.
    w = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[arch])
    log = []

    # prepare_tensors (base.py:1057): generate_extra_tensors first, then the checkpoint's tensors.
    extra = []
    if family == "llama3" and (rf := llama3_rope_freqs(hp, rp)) is not None:
        extra.append((gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", rf, None))
    tensors = [(gn, data, None) for gn, data, _ in extra]
    for hf_name, data in read_safetensors(d / "model.safetensors").items():
        if skip_tensor(family, hf_name):
            log.append(f"skip {hf_name}")
            continue
        gname = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gname is None:
            raise ValueError(f"{family}: can not map tensor {hf_name!r}")
        tensors.append((gname, modify(family, hf_name, data, hp), hf_name))
    for gname, data, hf_name in tensors:
        qt = qtype_for(gname, data)
        w.add_tensor(gname, gguf.quants.quantize(data, qt), raw_dtype=qt)
        log.append(f"{hf_name or '(generated)'} -> {gname} {qt.name} {list(data.shape)}")

    # prepare_metadata (base.py:1189-1228): general.type, the model card's general.* keys, the
    # family's hparams, the quantization version. set_vocab (TextModel.prepare_metadata) is skipped.
    total, shared, expert, n_expert = w.get_total_parameter_count()
    meta = gguf.Metadata.load(None, d, None, total)
    if meta.name is None:
        meta.name = d.name
    if meta.size_label is None and total > 0:
        meta.size_label = gguf.size_label(total, shared, expert, n_expert)
    w.add_type(gguf.GGUFType.MODEL)
    meta.set_gguf_meta_model(w)
    PARAMS[family](w, hp, rp, n_blocks)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    # ModelBase.write (base.py:1233-1239)
    w.write_header_to_file(path=out_path)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return log


# ----------------------------------------------------------------------------------------------
# verification (read back with GGUFReader)
# ----------------------------------------------------------------------------------------------

def field_value(f):
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return list(f.contents())
    return f.contents()


def verify_family(family: str, path: Path) -> None:
    d = FIXTURES / family
    hf_arch, arch = FAMILIES[family]
    hp, _ = load_hparams(d)
    n_blocks = hp["num_hidden_layers"]
    tmap = gguf.get_tensor_name_map(arch, n_blocks)
    r = gguf.GGUFReader(path)
    print(f"== {path.relative_to(ROOT)}")
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        print(f"   {k} = {field_value(f)!r} ({f.types[0].name})")
    assert field_value(r.fields["general.architecture"]) == gguf.MODEL_ARCH_NAMES[arch]
    by_name = {t.name: t for t in r.tensors}
    for t in r.tensors:
        print(f"   {t.name:34s} {t.tensor_type.name:4s} {[int(x) for x in t.shape]}")
    src = read_safetensors(d / "model.safetensors")
    seen = set()
    for hf_name, ref in src.items():
        if skip_tensor(family, hf_name):
            continue
        gname = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        t = by_name[gname]
        seen.add(gname)
        # ggml order is reversed: GGUFReader's shape is ne (innermost first), data is numpy row-major
        assert [int(x) for x in t.shape] == list(reversed(ref.shape)), (gname, t.shape, ref.shape)
        got = np.array(t.data).reshape(ref.shape).astype(np.float32)
        if family == "llama3" and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = hp["num_attention_heads"] if "q_proj" in hf_name else hp["num_key_value_heads"]
            got = llama_unpermute(got, heads)
        if family in ("gemma2", "gemma3") and hf_name.endswith("norm.weight"):
            # the "+1" was applied in fp32 and stored as F32: subtract it exactly, compare with tolerance
            # of one fp32 rounding of (w + 1)
            assert t.tensor_type == gguf.GGMLQuantizationType.F32
            np.testing.assert_allclose(got - 1, ref, rtol=0, atol=2.0 ** -23 * 2, err_msg=gname)
            np.testing.assert_array_equal(got, ref + np.float32(1), err_msg=gname)
            continue
        if t.tensor_type == gguf.GGMLQuantizationType.F16:
            expect = ref.astype(np.float16).astype(np.float32)
            assert ref.ndim == 2
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32 and ref.ndim == 1, (gname, t.tensor_type)
            expect = ref
        np.testing.assert_array_equal(got, expect, err_msg=gname)
        # and to fp16 rounding of the original
        np.testing.assert_allclose(got, ref, rtol=2.0 ** -11, atol=2.0 ** -24, err_msg=gname)
    extra = set(by_name) - seen
    if family == "llama3":
        assert extra == {"rope_freqs.weight"}, extra
        rf = np.array(by_name["rope_freqs.weight"].data)
        print(f"   rope_freqs.weight = {rf.tolist()}")
    else:
        assert not extra, extra
    print(f"   OK: {len(seen)} tensors match the safetensors (transforms undone; F16 = fp32 rounded to fp16)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=list(FAMILIES), help="limit the run to these families")
    ap.add_argument("--no-verify", action="store_true", help="write only; skip the read-back checks")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    fams = args.only or list(FAMILIES)
    import importlib.metadata
    print(f"gguf {importlib.metadata.version('gguf')}, numpy {np.__version__}; converter followed: "
          f"llama.cpp {LLAMA_CPP_COMMIT[:12]}")
    for fam in fams:
        out = FIXTURES / fam / "model.gguf"
        log = write_family(fam, out)
        print(f"-- {fam}: wrote {out.relative_to(ROOT)}")
        for line in log:
            print(f"   {line}")
    if not args.no_verify:
        for fam in fams:
            verify_family(fam, FIXTURES / fam / "model.gguf")
    print(f"\n{'family':8s} {'model.gguf':>11s} {'model.safetensors':>18s}")
    tot_g = tot_s = 0
    for fam in fams:
        g = (FIXTURES / fam / "model.gguf").stat().st_size
        s = (FIXTURES / fam / "model.safetensors").stat().st_size
        tot_g += g
        tot_s += s
        print(f"{fam:8s} {g:11,d} {s:18,d}")
    print(f"{'total':8s} {tot_g:11,d} {tot_s:18,d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
