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


def _define_max_pool2d_backward_from_input():
    """tgraph::max_pool2d_backward_from_input(grad, x, kernel_size, stride, padding, dilation,
    ceil_mode): max pooling's gradient from the pooled input alone (tgraph recomputes each
    window's first maximum, the one torch's indices hold). Traced in place of
    aten.max_pool2d_with_indices_backward, it leaves the forward's indices unread, so AOTAutograd
    no longer saves them: ResNet-50's int64 indices were 0.38 GiB at batch 256, kept from the
    forward to the backward, and an int32 -> int64 cast kernel a step. Run by torch (a graph
    partitioned around it, or eager), it recomputes the indices and calls torch's gradient."""
    try:
        from torch.library import custom_op
    except ImportError:  # an older torch: the indices are saved as before
        return None

    def decomposed(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
        return torch.ops.tgraph.max_pool2d_backward_from_input(grad, x, list(kernel_size), list(stride),
                                                               list(padding), list(dilation), bool(ceil_mode))
    try:  # registered already (this module loaded again)
        torch.ops.tgraph.max_pool2d_backward_from_input
        return decomposed
    except (AttributeError, RuntimeError):
        pass

    @custom_op("tgraph::max_pool2d_backward_from_input", mutates_args=())
    def max_pool2d_backward_from_input(grad: torch.Tensor, x: torch.Tensor, kernel_size: list[int],
                                       stride: list[int], padding: list[int], dilation: list[int],
                                       ceil_mode: bool) -> torch.Tensor:
        _, idx = aten.max_pool2d_with_indices.default(x, kernel_size, stride, padding, dilation, ceil_mode)
        return aten.max_pool2d_with_indices_backward.default(grad, x, kernel_size, stride, padding, dilation,
                                                             ceil_mode, idx)

    @max_pool2d_backward_from_input.register_fake
    def _(grad, x, kernel_size, stride, padding, dilation, ceil_mode):
        return torch.empty_like(x)

    return decomposed


_MAX_POOL2D_BACKWARD = _define_max_pool2d_backward_from_input()


def decompositions() -> dict:
    """torch's core ATen decompositions, the fused fast paths above, and max pooling's gradient
    without the forward's indices."""
    from torch._decomp import core_aten_decompositions
    table = dict(core_aten_decompositions())
    table[aten._native_multi_head_attention.default] = _native_multi_head_attention
    table[aten._transformer_encoder_layer_fwd.default] = _transformer_encoder_layer_fwd
    if _MAX_POOL2D_BACKWARD is not None:
        table[aten.max_pool2d_with_indices_backward.default] = _MAX_POOL2D_BACKWARD
    return table


def export_decompositions():
    """What tgraph.torch.compile's torch.export graphs are lowered with: torch.export's default
    table, less scaled_dot_product_attention, which tgraph converts whole (one fused kernel on
    CUDA; its math form elsewhere) instead of torch's math decomposition."""
    import torch
    table = torch.export.default_decompositions()
    try:
        del table[torch.ops.aten.scaled_dot_product_attention.default]
    except KeyError:
        pass
    return table
