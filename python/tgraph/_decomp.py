"""The decompositions tgraph lowers with: torch's core ATen table, plus torch's fused inference
fast paths (what nn.TransformerEncoderLayer and nn.MultiheadAttention call in eval under
no_grad) written as the ops they fuse, so they arrive as core ATen like everything else."""
from __future__ import annotations

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                 proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                 mask_type=None):
    """aten._native_multi_head_attention (batch first [B, L, E]): in-projection, attention with
    a boolean (True: masked out) or additive mask, out-projection. mask_type: 0 an [L, S] mask,
    1 a [B, S] key-padding mask, 2 a merged [B, H, L, S] one (None: by its rank)."""
    b, lq, e = query.shape
    d = e // num_head
    w_q, w_k, w_v = qkv_weight.chunk(3)
    b_q, b_k, b_v = qkv_bias.chunk(3) if qkv_bias is not None else (None, None, None)

    def heads(x, w, bias):
        return F.linear(x, w, bias).reshape(x.shape[0], x.shape[1], num_head, d).transpose(1, 2)

    q, k, v = heads(query, w_q, b_q), heads(key, w_k, b_k), heads(value, w_v, b_v)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (d ** -0.5)
    if mask is not None:
        if mask_type == 1:
            mask = mask.reshape(b, 1, 1, mask.shape[-1])
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(mask, float("-inf"))
        else:
            scores = scores + mask
    attn = torch.softmax(scores, -1)
    out = torch.matmul(attn, v).transpose(1, 2).reshape(b, lq, e)
    out = F.linear(out, proj_weight, proj_bias)
    if not need_weights:
        return out, out.new_empty(0)
    return out, attn.mean(1) if average_attn_weights else attn


def _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                   mask_type=None):
    """aten._transformer_encoder_layer_fwd, as torch's own C++ composes it (transformer.cpp)."""
    def norm(x, w, b):
        return F.layer_norm(x, (embed_dim,), w, b, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = _native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                     proj_bias, mask, False, True, mask_type)[0] + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    h = F.linear(x, ffn_weight_1, ffn_bias_1)
    h = F.gelu(h) if use_gelu else F.relu(h)
    x = F.linear(h, ffn_weight_2, ffn_bias_2) + residual
    return x if norm_first else norm(x, norm_weight_2, norm_bias_2)


def decompositions() -> dict:
    """torch's core ATen decompositions and the fused fast paths above."""
    from torch._decomp import core_aten_decompositions
    table = dict(core_aten_decompositions())
    table[aten._native_multi_head_attention.default] = _native_multi_head_attention
    table[aten._transformer_encoder_layer_fwd.default] = _transformer_encoder_layer_fwd
    return table
