"""Coverage of the PyTorch frontend: every model in torchvision.models.list_models() and a set of
transformers architectures from reduced configs, random weights, eval mode, CPU, f32, through
tgraph.torch.compile ("compile") and torch.compile(backend="tgraph") ("backend"), each against
eager (max |got - want| <= 1e-4 * max |want|, every floating output). Prints a table:

    model | entry point | pass / partitioned / fail / skip | why | first-call seconds

"partitioned": it ran and matched, with the ops named left to PyTorch. Each model runs in a
subprocess of its own with a time limit (a model that hangs or crashes fails alone).

    PYTHONPATH=build-py/python python3 bench/torch_coverage.py                 # everything
    PYTHONPATH=build-py/python python3 bench/torch_coverage.py resnet18 bert   # names containing these
    ... --family torchvision|transformers --timeout 600 --markdown out.md --jsonl results.jsonl
    ... --device cuda --jobs 8      # on the GPU: models and inputs there, eight models at a time

On CUDA the inference entries compare against eager on the same GPU with TF32 off (torch's
cuDNN allows it by default; tgraph's f32 is true f32), and the training entry runs only
tgraph's step on the GPU: its references (eager f32, f64, the kink test) stay on the CPU.

With --dynamic, each entry compiles with dynamic=True and runs three sizes (batch and image /
sequence / audio length: _sizes) against eager, counting the executables compiled: "dynamic" is
one for every size, "per image size" / "per size" say what tgraph (or torch.export, which
specialises what it must) could not keep, with tgraph.torch's line saying why.

    PYTHONPATH=build/python python3 bench/torch_coverage.py --dynamic --family transformers

Not part of `make test`: the whole run takes hours on 2 CPU cores.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

DEVICE = os.environ.get("TG_COV_DEVICE", "cpu")  # set by --device, read by the per-model subprocess


def _to_device(v):
    """args / kwargs (nested lists, tuples and dicts of tensors) on DEVICE."""
    import torch
    from torch.utils._pytree import tree_map
    return tree_map(lambda t: t.to(DEVICE) if isinstance(t, torch.Tensor) else t, v)


def _exact_f32() -> None:
    """Eager on CUDA in true f32: torch lets cuDNN use TF32 by default, which is 1e-3 off."""
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

# Too large for a 2-core CPU run in minutes (random init alone of 300M-650M parameters, and
# their f32 weights copied into the graph twice): listed, skipped, said so in the table.
TOO_LARGE = {"vit_h_14", "vit_l_16", "vit_l_32", "regnet_y_128gf", "regnet_y_32gf", "regnet_x_32gf",
             "regnet_y_16gf", "regnet_x_16gf", "resnext101_64x4d", "efficientnet_b7", "efficientnet_v2_l",
             "convnext_large", "swin3d_b", "mvit_v1_b", "mvit_v2_s", "vgg19_bn", "vgg19", "vgg16", "vgg16_bn",
             "wide_resnet101_2", "swin_v2_b", "swin_b"}
# image size each family needs at least (fixed position embeddings, downsampling depth)
IMAGE = {"vit_": 224, "maxvit_t": 224, "inception_v3": 75, "googlenet": 64, "swin_v2": 64, "efficientnet_b": 64}


# ---- models -----------------------------------------------------------------------------------

def torchvision_models() -> list[str]:
    """Every model in torchvision.models.list_models(): classification, segmentation, video,
    optical flow, the float models behind the quantized ones, and detection last (slowest)."""
    import torchvision
    tm = torchvision.models
    order = [tm, tm.segmentation, tm.video, tm.optical_flow, tm.quantization, tm.detection]
    names = [n for mod in order for n in tm.list_models(module=mod)]
    return names + [n for n in tm.list_models() if n not in names]


def build_torchvision(name: str):
    """(model, args, kwargs) with small inputs where the model allows."""
    import torch
    import torchvision
    tm = torchvision.models
    fam = ("segmentation" if name in tm.list_models(module=tm.segmentation) else
           "detection" if name in tm.list_models(module=tm.detection) else
           "video" if name in tm.list_models(module=tm.video) else
           "optical_flow" if name in tm.list_models(module=tm.optical_flow) else
           "quantization" if name in tm.list_models(module=tm.quantization) else "classification")
    kw = {"weights": None}
    if fam == "classification":
        kw["num_classes"] = 10
        if name in ("googlenet", "inception_v3"):
            kw["aux_logits"] = False
            kw["init_weights"] = True
        size = next((s for p, s in IMAGE.items() if name.startswith(p)), 64)
        model = tm.get_model(name, **kw)
        return model, (torch.randn(1, 3, size, size),), {}
    if fam == "segmentation":
        model = tm.get_model(name, weights_backbone=None, num_classes=5, **kw)
        return model, (torch.randn(1, 3, 64, 64),), {}
    if fam == "detection":
        extra = {"num_classes": 3, "weights_backbone": None}
        if name.startswith("keypointrcnn"):
            extra["num_keypoints"] = 5
        if name.startswith(("fasterrcnn", "maskrcnn", "keypointrcnn")):
            # In training, the region samplers draw a random subset of the anchors and proposals
            # (torch.randperm): quotas above their number take them all, so eager and a compiled
            # step train on the same set whatever order the draws come in.
            extra.update(rpn_batch_size_per_image=1 << 20, box_batch_size_per_image=1 << 20)
        model = tm.get_model(name, **extra, **kw)
        return model, ([torch.rand(3, 128, 128)],), {}
    if fam == "video":
        model = tm.get_model(name, num_classes=10, **kw)
        frames, size = (16, 224) if name.startswith(("mvit", "s3d")) else (8, 64)  # s3d's last pool is 2x7x7
        return model, (torch.randn(1, 3, frames, size, size),), {}
    if fam == "optical_flow":
        model = tm.get_model(name, **kw)
        return model, (torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128)), {"num_flow_updates": 2}
    if name in ("quantized_googlenet", "quantized_inception_v3"):  # as their float twins above: the
        kw.update(aux_logits=False, init_weights=True)  # aux head's pooling needs > 75x75 in training
    model = tm.get_model(name, quantize=False, **kw)  # the float model a quantized one starts from
    size = 75 if "inception" in name else 64
    return model, (torch.randn(1, 3, size, size),), {}


def _hf(cls_name: str, cfg_name: str, inputs: str, **cfg):
    return {"model": cls_name, "config": cfg_name, "inputs": inputs, "cfg": cfg}


SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=120,
             max_position_embeddings=64)
VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
              patch_size=8, num_channels=3)
AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
             num_conv_pos_embedding_groups=4, vocab_size=32)
HF = {
    # encoders
    "bert": _hf("BertModel", "BertConfig", "ids+mask", **SMALL),
    "roberta": _hf("RobertaModel", "RobertaConfig", "ids+mask", **SMALL),
    "distilbert": _hf("DistilBertModel", "DistilBertConfig", "ids+mask", dim=32, n_layers=2, n_heads=4,
                      hidden_dim=64, vocab_size=120, max_position_embeddings=64),
    "albert": _hf("AlbertModel", "AlbertConfig", "ids+mask", embedding_size=16, **SMALL),
    "electra": _hf("ElectraModel", "ElectraConfig", "ids+mask", embedding_size=16, **SMALL),
    "deberta_v2": _hf("DebertaV2Model", "DebertaV2Config", "ids+mask", **SMALL),
    "mpnet": _hf("MPNetModel", "MPNetConfig", "ids+mask", **SMALL),
    # decoders
    "gpt2": _hf("GPT2Model", "GPT2Config", "ids", n_embd=32, n_layer=2, n_head=4, vocab_size=120, n_positions=64,
               bos_token_id=0, eos_token_id=0),
    "llama": _hf("LlamaModel", "LlamaConfig", "ids", num_key_value_heads=2, **SMALL),
    "mistral": _hf("MistralModel", "MistralConfig", "ids", num_key_value_heads=2, **SMALL),
    "qwen2": _hf("Qwen2Model", "Qwen2Config", "ids", num_key_value_heads=2, **SMALL),
    "gemma": _hf("GemmaModel", "GemmaConfig", "ids", num_key_value_heads=2, head_dim=8, **SMALL),
    "phi": _hf("PhiModel", "PhiConfig", "ids", **SMALL),
    "gpt_neox": _hf("GPTNeoXModel", "GPTNeoXConfig", "ids", **SMALL),
    "opt": _hf("OPTModel", "OPTConfig", "ids", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               ffn_dim=64, vocab_size=120, max_position_embeddings=64, word_embed_proj_dim=32),
    "bloom": _hf("BloomModel", "BloomConfig", "ids", hidden_size=32, n_layer=2, n_head=4, vocab_size=120),
    "falcon": _hf("FalconModel", "FalconConfig", "ids", **SMALL),
    # encoder-decoders
    "t5": _hf("T5Model", "T5Config", "seq2seq", d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
              vocab_size=120),
    "bart": _hf("BartModel", "BartConfig", "seq2seq", d_model=32, encoder_layers=2, decoder_layers=2,
                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                vocab_size=120, max_position_embeddings=64),
    "marian": _hf("MarianModel", "MarianConfig", "seq2seq", d_model=32, encoder_layers=2, decoder_layers=2,
                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                  vocab_size=120, max_position_embeddings=64, pad_token_id=0, decoder_start_token_id=0),
    "pegasus": _hf("PegasusModel", "PegasusConfig", "seq2seq", d_model=32, encoder_layers=2, decoder_layers=2,
                   encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                   vocab_size=120, max_position_embeddings=64),
    # vision
    "vit": _hf("ViTModel", "ViTConfig", "pixels32", **VISION),
    "deit": _hf("DeiTModel", "DeiTConfig", "pixels32", **VISION),
    "beit": _hf("BeitModel", "BeitConfig", "pixels32", **VISION),
    "swin": _hf("SwinModel", "SwinConfig", "pixels32", image_size=32, patch_size=2, embed_dim=16, depths=[1, 1],
                num_heads=[2, 4], window_size=4),
    "convnext": _hf("ConvNextModel", "ConvNextConfig", "pixels32", hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1]),
    "resnet_hf": _hf("ResNetModel", "ResNetConfig", "pixels32", embedding_size=16, hidden_sizes=[16, 32, 64, 128],
                     depths=[1, 1, 1, 1]),
    "segformer": _hf("SegformerModel", "SegformerConfig", "pixels32", hidden_sizes=[16, 32, 48, 64],
                     num_attention_heads=[1, 2, 2, 4], depths=[1, 1, 1, 1], decoder_hidden_size=32),
    "mobilevit": _hf("MobileViTModel", "MobileViTConfig", "pixels32", image_size=32, hidden_sizes=[16, 24, 32],
                     neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
    # audio
    "wav2vec2": _hf("Wav2Vec2Model", "Wav2Vec2Config", "audio", **AUDIO),
    "hubert": _hf("HubertModel", "HubertConfig", "audio", **AUDIO),
    "whisper": _hf("WhisperModel", "WhisperConfig", "whisper", d_model=32, encoder_layers=2, decoder_layers=2,
                   encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                   vocab_size=120, num_mel_bins=16, max_source_positions=32, max_target_positions=32,
                   pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1),
}


def build_transformers(name: str):
    import torch
    import transformers
    spec = HF[name]
    cfg = getattr(transformers, spec["config"])(**spec["cfg"])
    model = getattr(transformers, spec["model"])(cfg)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 100, (2, 8), generator=g)
    kind = spec["inputs"]
    if kind == "ids":
        return model, (), {"input_ids": ids}
    if kind == "ids+mask":
        mask = torch.ones(2, 8, dtype=torch.long)
        mask[1, 6:] = 0
        return model, (), {"input_ids": ids, "attention_mask": mask}
    if kind == "seq2seq":
        return model, (), {"input_ids": ids, "decoder_input_ids": torch.randint(3, 100, (2, 5), generator=g)}
    if kind == "pixels32":
        return model, (), {"pixel_values": torch.randn(2, 3, 32, 32, generator=g)}
    if kind == "audio":
        return model, (), {"input_values": torch.randn(2, 800, generator=g)}
    if kind == "whisper":
        return model, (), {"input_features": torch.randn(1, 16, 64, generator=g),
                           "decoder_input_ids": torch.randint(3, 100, (1, 5), generator=g)}
    raise ValueError(kind)


# ---- one model, in a subprocess ----------------------------------------------------------------

def _tensors(out) -> list:
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def _detections(out) -> list | None:
    """A detection model's output (torchvision: a list of dicts with boxes, scores, labels and
    maybe masks / keypoints per image), else None."""
    if isinstance(out, (list, tuple)) and out and all(isinstance(d, dict) and "boxes" in d and "scores" in d
                                                      for d in out):
        return list(out)
    return None


def _masks_agree(a, b) -> bool:
    """Pasted instance masks (sigmoid probabilities resampled into the image) agree when they are
    within 1e-2 everywhere and, thresholded at 0.5 as users do, differ only at pixels whose eager
    probability is within 1e-2 of the threshold. The mask head's logits reach +-700 with random
    weights, where eager f32 is itself 1e-4 off f64 before the resampling; torch's own aot_eager
    backend is 2e-3 off eager there (docs/pytorch-coverage.md)."""
    a, b = a.float(), b.float()
    if a.shape != b.shape or float((a - b).abs().max()) > 1e-2:
        return False
    flipped = (a > 0.5) != (b > 0.5)
    return bool(((b - 0.5).abs()[flipped] <= 1e-2).all())


def _same_detection(g: dict, w: dict, i: int, j: int, tol: dict) -> bool:
    """tgraph's row j is eager's row i, at a place whose eager score ties with i's."""
    import torch
    if max(abs(float(g["scores"][j]) - float(w["scores"][i])),
           abs(float(w["scores"][j]) - float(w["scores"][i]))) > tol["scores"]:
        return False
    for key in w:
        a, b = g[key][j], w[key][i]
        if key == "masks":  # probabilities pasted into the image, thresholded at 0.5 by users
            if not _masks_agree(a, b):
                return False
        elif (float((a.float() - b.float()).abs().max()) > tol[key] if b.is_floating_point()
                else not torch.equal(a, b)):
            return False
    return True


def _compare_detections(got: list, want: list) -> str | None:
    """Detections compared as sets: each of eager's rows (box, score, label, mask ...) must have a
    row of tgraph's within the tolerance, in eager's order except among rows whose scores tie
    within it. With random weights a detector's scores are near ties (Faster R-CNN ResNet-50: two
    final scores 2 ulp apart), and the order of tied rows is rounding (torch's own aot_eager
    backend swaps the same two rows against eager); checked graph by graph, every graph
    TorchDynamo hands over matches eager to 1e-4, integer outputs exactly (docs/pytorch-coverage.md)."""
    if len(got) != len(want):
        return f"{len(got)} images, eager has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if set(g) != set(w):
            return f"image {k}: outputs {sorted(g)}, eager {sorted(w)}"
        n = len(w["scores"])
        if len(g["scores"]) != n:
            return f"image {k}: {len(g['scores'])} detections, eager {n}"
        tol = {key: 1e-4 * (float(w[key].abs().max()) if w[key].numel() else 0.0) + 1e-6
               for key in w if w[key].is_floating_point()}
        free = list(range(n))
        for i in range(n):
            j = next((j for j in free if _same_detection(g, w, i, j, tol)), None)
            if j is None:
                return f"image {k}: eager's detection {i} (score {float(w['scores'][i]):.6g}) has no match"
            free.remove(j)
    return None


def _compare(got, want) -> str | None:
    """None when every floating output matches, else why not (detections: as sets, _compare_detections)."""
    import torch
    dg, dw = _detections(got), _detections(want)
    if dg is not None and dw is not None:
        return _compare_detections(dg, dw)
    g, w = _tensors(got), _tensors(want)
    if len(g) != len(w):
        return f"{len(g)} outputs, eager has {len(w)}"
    for i, (a, b) in enumerate(zip(g, w)):
        if a.shape != b.shape:
            return f"output {i}: shape {tuple(a.shape)}, eager {tuple(b.shape)}"
        if b.is_floating_point():
            scale = float(b.abs().max()) if b.numel() else 0.0
            err = float((a.float() - b.float()).abs().max()) if b.numel() else 0.0
            if not err <= 1e-4 * scale + 1e-6:
                return f"output {i}: max error {err:.2e} against max {scale:.2e}"
        elif not torch.equal(a, b):
            return f"output {i}: integer values differ"
    return None


def _train_step(model, args, kwargs, backend: str | None):
    """One training step of `model` (batch norm on batch statistics, dropout off so that both
    sides compute the same function): the loss (mean square of every floating output) and each
    parameter's gradient, in eager or through torch.compile(backend=...)."""
    import torch
    run = model if backend is None else torch.compile(model, backend=backend, dynamic=False)
    model.zero_grad(set_to_none=True)
    loss = sum(t.float().pow(2).mean() for t in _tensors(run(*args, **kwargs)) if t.is_floating_point())
    loss.backward()
    return float(loss), [(n, p.grad) for n, p in model.named_parameters() if p.requires_grad]


def _train_mode(model):
    """Training mode with every dropout probability 0 (nn.Dropout*, torchvision's StochasticDepth,
    the float `*dropout*` / `*layerdrop*` attributes of Hugging Face modules and configs), so that
    both sides compute the same function."""
    model.train()
    for m in model.modules():
        if type(m).__name__.startswith(("Dropout", "StochasticDepth", "AlphaDropout")) and hasattr(m, "p"):
            m.p = 0.0
        for k, v in list(vars(m).items()):
            if ("dropout" in k or "layerdrop" in k) and isinstance(v, float):
                setattr(m, k, 0.0)
    cfg = getattr(model, "config", None)  # Hugging Face layers read some from the config (layerdrop)
    for k, v in (vars(cfg).items() if cfg is not None else ()):
        if ("dropout" in k or "layerdrop" in k) and isinstance(v, float):
            setattr(cfg, k, 0.0)
    return model


def _track_left(tgt) -> list[str]:
    """The ops (and "graphs with an empty input") this process leaves to PyTorch, as tgraph.torch
    reports them: a list that fills as the model runs (clear it between entry points)."""
    left: list[str] = []
    real_report, real_line = tgt._report, tgt._report_line

    def report(gm, names):
        real_report(gm, names)
        left.extend(str(n.target) for n in gm.graph.nodes if n.name in names and n.op == "call_function"
                    and "getitem" not in str(n.target) and str(n.target) not in left)

    def report_line(line):
        real_line(line)
        if "empty input" in line and "graphs with an empty input" not in left:
            left.append("graphs with an empty input")
    tgt._report, tgt._report_line = report, report_line
    return left


def _verdict(row: dict, why: str | None, left: list[str]) -> None:
    """The row's status: fail on a mismatch, else partitioned when ops were left to PyTorch."""
    if why:
        row.update(status="fail", why="mismatch: " + why)
    elif left:
        row.update(status="partitioned", why="left to PyTorch: " + ", ".join(left))
    else:
        row.update(status="pass", why="")


def _failed(row: dict, e: Exception) -> None:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    row.update(status="fail", why=f"{type(e).__name__}: {msg}"[:300])


def _doubled(args, kwargs):
    """Every floating tensor in args and kwargs (nested in lists and dicts too) in f64."""
    import torch
    from torch.utils._pytree import tree_map
    f = lambda v: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v  # noqa: E731
    return tree_map(f, tuple(args)), tree_map(f, dict(kwargs))


def _within(err: float, ref: float, scale: float) -> bool:
    """A gradient's error against its reference passes: at most twice the peer's (`ref`: eager
    f32's against f64, or the spread that explains it) plus 1e-3 of the gradient's largest
    element."""
    return err <= 2 * ref + 1e-3 * scale + 1e-5


def _ill_conditioned(ours: list, eagers: list) -> bool:
    """Whether a step is too ill-conditioned for a per-parameter bound, and tgraph as close to
    f64 as eager f32 is on the whole. At batch 2 a deep network's batch norms normalise a few
    values each (ResNet-50's last stages at 64 x 64: 8 and 32 per channel); a channel whose
    spread is near zero amplifies any rounding, so eager f32 itself is percents off f64 in every
    parameter and which parameter's error spikes is a matter of chance. There, tgraph passes when
    its median relative error over the parameters is at most twice eager's and its largest at
    most four times eager's largest: a wrong gradient is off by its own size, not by rounding."""
    if not eagers or statistics.median(eagers) <= 1e-3:
        return False
    return statistics.median(ours) <= 2 * statistics.median(eagers) and max(ours) <= 4 * max(eagers)


def _kink_spread(m64, args, kwargs, truth) -> dict | None:
    """How far f64's own gradients move when every layer's output moves by f32 rounding (each
    leaf module's floating output times 1 + 6e-8 noise, the input too; twelve draws): per
    parameter, the largest change. Near zero for a smooth step; as large as the gradient where
    a ReLU's input sits within rounding of its kink in the last layers — then which side f32
    lands on is chance (RegNet-X-400MF at batch 2: f64 itself moves 52% in some draws and not in
    others, as much as tgraph differed from it), and a gradient passes when its error is at
    most twice this spread. Only computed for a step that failed; None where the input is not
    one float tensor."""
    import copy
    import torch
    if len(args) != 1 or not isinstance(args[0], torch.Tensor) or not args[0].is_floating_point():
        return None
    x = args[0].double()
    spread: dict = {}
    for k in range(12):
        g = torch.Generator().manual_seed(1000 + k)

        def jitter(t):
            return t * (1 + 6e-8 * torch.randn(t.shape, generator=g, dtype=t.dtype)) if t.is_floating_point() else t
        m = copy.deepcopy(m64)
        hooks = [mod.register_forward_hook(lambda _m, _i, out: jitter(out) if isinstance(out, torch.Tensor) else out)
                 for mod in m.modules() if not list(mod.children())]
        _, moved = _train_step(m, (jitter(x),), _doubled((), kwargs)[1], None)
        for h in hooks:
            h.remove()
        for (n, a), (_, b) in zip(moved, truth):
            if a is not None and b is not None:
                spread[n] = max(spread.get(n, 0.0), float((a.double() - b.double()).abs().max()))
    return spread


def _detection_targets(name: str, images: list) -> list:
    """Two boxes an image (labels 1 and 2), with masks (Mask R-CNN) and five visible keypoints
    inside each box (Keypoint R-CNN): what torchvision's detection models need in training."""
    import torch
    targets = []
    for k, img in enumerate(images):
        h, w = img.shape[-2:]
        boxes = torch.tensor([[0.1 * w, 0.15 * h, 0.5 * w, 0.7 * h], [0.35 * w + k, 0.25 * h, 0.8 * w, 0.9 * h]])
        t = {"boxes": boxes, "labels": torch.tensor([1, 2])}
        if name.startswith("maskrcnn"):
            masks = torch.zeros(2, h, w, dtype=torch.uint8)
            for i, (x0, y0, x1, y1) in enumerate(boxes.long().tolist()):
                masks[i, y0:y1, x0:x1] = 1
            t["masks"] = masks
        if name.startswith("keypointrcnn"):
            frac = torch.linspace(0.2, 0.8, 5)
            kp = [torch.stack([b[0] + frac * (b[2] - b[0]), b[1] + frac * (b[3] - b[1]), torch.ones(5)], 1) for b in boxes]
            t["keypoints"] = torch.stack(kp)
        targets.append(t)
    return targets


def _beyond_peer(got_loss, got, want_loss, want, peer_loss, peer) -> str | None:
    """What of tgraph's step is more than twice as far from eager's as torch.compile's own
    aot_eager step is (loss, then each gradient, plus 1e-3 of its largest element); None if
    nothing."""
    if abs(got_loss - want_loss) > 2 * abs(peer_loss - want_loss) + 1e-4 * abs(want_loss):
        return f"loss {got_loss:.6g}, eager {want_loss:.6g}, aot_eager {peer_loss:.6g}"
    for (n, g), (_, w), (_, p) in zip(got, want, peer):
        if g is None or w is None or p is None:
            continue
        scale = float(w.abs().max())
        err, ref = float((g - w).abs().max()), float((p - w).abs().max())
        if not _within(err, ref, scale):
            return f"gradient of {n}: {err:.2e} from eager's (aot_eager's {ref:.2e}, max {scale:.2e})"
    return None


def run_train(family: str, name: str) -> dict:
    """The "train" entry: a training step through torch.compile(backend="tgraph_train") against
    eager from the same weights and inputs (batch 2). The truth is eager in f64 where the model
    runs in f64: a small random network's batch norms over a few values can be ill-conditioned
    enough that eager f32 itself is 30% off f64 (ResNet-18 at 64x64), so tgraph passes when its
    loss is within 1e-4 and each gradient's error against f64 is at most twice eager f32's plus
    1e-3 of the gradient's largest element (against eager f32 alone where f64 cannot run)."""
    import copy
    import torch
    import tgraph.torch as tgt
    left = _track_left(tgt)
    torch.manual_seed(0)
    model, args, kwargs = (build_torchvision if family == "torchvision" else build_transformers)(name)
    if args and isinstance(args[0], torch.Tensor) and args[0].shape[0] == 1:  # batch statistics need two
        args = (torch.cat([args[0], torch.randn_like(args[0])]),) + tuple(args[1:])
    if family == "torchvision" and args and isinstance(args[0], list):  # detection: two images and targets
        images = args[0] + [torch.rand_like(args[0][0])]
        args = (images, _detection_targets(name, images))
    row = {"model": name, "family": family, "entry": "train"}
    try:
        want_loss, want = _train_step(_train_mode(copy.deepcopy(model)), args, kwargs, None)
        m64 = None
        try:
            m64 = _train_mode(copy.deepcopy(model).double())
            true_loss, truth = _train_step(copy.deepcopy(m64), *_doubled(args, kwargs), None)
        except Exception:  # noqa: BLE001  (an op without f64: eager f32 is the reference)
            true_loss, truth, m64 = want_loss, want, None
        peer_model = copy.deepcopy(model) if args and isinstance(args[0], list) else None  # detection
        torch._dynamo.reset()
        t = time.time()
        if DEVICE == "cpu":
            got_loss, got = _train_step(_train_mode(model), args, kwargs, "tgraph_train")
        else:
            _exact_f32()
            got_loss, got = _train_step(_train_mode(model.to(DEVICE)), _to_device(args), _to_device(kwargs),
                                        "tgraph_train")
            got = [(n, g.cpu() if g is not None else None) for n, g in got]
        row["first_call_s"] = round(time.time() - t, 2)
        why = None
        # Within 1e-4 of eager f32's loss, or (where eager f32 is itself that far off f64: batch
        # norms over two values) at most twice as far from f64 as eager f32 is.
        if not (abs(got_loss - want_loss) <= 1e-4 * abs(want_loss) + 1e-6 or (got_loss != got_loss and want_loss != want_loss)
                or abs(got_loss - true_loss) <= 2 * abs(want_loss - true_loss)):
            why = f"loss {got_loss:.6g}, eager {want_loss:.6g}, f64 {true_loss:.6g}"
        elif abs(got_loss - want_loss) > 1e-4 * abs(want_loss) + 1e-6:
            row["note"] = f"loss {got_loss:.6g}, eager f32 {want_loss:.6g}, f64 {true_loss:.6g}"
        worst, ours, eagers, errs = None, [], [], []  # first parameter over the bound; relative, absolute errors
        for (n, g), (_, w), (_, x) in zip(got, want, truth):
            if why:
                break
            if (g is None) != (w is None):
                why = f"gradient of {n}: {'none' if g is None else 'one'} where eager has {'one' if g is None else 'none'}"
            elif w is not None:
                x = x.double()
                scale = float(x.abs().max())
                err, ref = float((g.double() - x).abs().max()), float((w.double() - x).abs().max())
                ours.append(err / (scale + 1e-30))
                eagers.append(ref / (scale + 1e-30))
                errs.append((n, err, ref, scale))
                if not _within(err, ref, scale) and worst is None:
                    worst = f"gradient of {n}: max error {err:.2e} against f64 (eager f32: {ref:.2e}, max {scale:.2e})"
        if not why and worst and not _ill_conditioned(ours, eagers) and m64 is not None:
            kink = _kink_spread(m64, args, kwargs, truth)
            if kink is not None and all(_within(err, max(ref, kink[n]), scale) for n, err, ref, scale in errs):
                wn, we, wr, _ = max(errs, key=lambda e: e[1] / (2 * e[2] + 1e-3 * e[3] + 1e-5))
                row["note"] = (row.get("note", "") + "; " if row.get("note") else "") + (
                    f"at a kink: f64's own gradient of {wn} moves by {kink[wn]:.2e} when every layer moves by one f32 "
                    f"rounding (tgraph's error {we:.2e}, eager f32's {wr:.2e})")
                worst = None
        if not why and worst:
            why = worst if not _ill_conditioned(ours, eagers) else None
            if not why:
                row["note"] = (row.get("note", "") + "; " if row.get("note") else "") + (f"ill-conditioned (eager f32 {statistics.median(eagers):.1e} off f64, median over "
                               f"parameters; tgraph {statistics.median(ours):.1e}); {worst}")
        if why and peer_model is not None:
            # Detection with random weights: proposals and boxes tie in score, so which survive
            # top-k and NMS depends on the order of operations, and torch's own compiler does not
            # reproduce eager's loss either. tgraph passes within twice what aot_eager moves.
            torch._dynamo.reset()
            peer_loss, peer = _train_step(_train_mode(peer_model), args, kwargs, "aot_eager")
            off = _beyond_peer(got_loss, got, want_loss, want, peer_loss, peer)
            if off is None:
                row["note"] = (f"torch.compile's aot_eager moves the loss too: eager {want_loss:.6g}, aot_eager "
                               f"{peer_loss:.6g}, tgraph {got_loss:.6g} (tied proposals)")
                why = None
            else:
                why += f"; beyond aot_eager's own difference: {off}"
        _verdict(row, why, left)
        if row["status"] != "fail" and row.get("note"):
            row["why"] = (row["why"] + "; " if row["why"] else "") + row.pop("note")
    except Exception as e:  # noqa: BLE001  (the table says why)
        _failed(row, e)
    return row


def run_one(family: str, name: str, entries: list[str]) -> list[dict]:
    if entries == ["train"]:
        return [run_train(family, name)]
    import torch
    torch.set_num_threads(int(os.environ.get("TG_COV_THREADS", 0)) or max(1, os.cpu_count() or 1))
    import tgraph.torch as tgt
    left = _track_left(tgt)
    torch.manual_seed(0)
    model, args, kwargs = (build_torchvision if family == "torchvision" else build_transformers)(name)
    model.eval()
    if DEVICE != "cpu":
        _exact_f32()
        model, args, kwargs = model.to(DEVICE), _to_device(args), _to_device(kwargs)
    with torch.no_grad():
        want = model(*args, **kwargs)
    rows = []
    for entry in entries:
        left.clear()
        torch._dynamo.reset()
        row = {"model": name, "family": family, "entry": entry}
        try:
            fast = tgt.compile(model) if entry == "compile" else torch.compile(model, backend="tgraph", dynamic=False)
            t = time.time()
            with torch.no_grad():
                got = fast(*args, **kwargs)
            row["first_call_s"] = round(time.time() - t, 2)
            why = _compare(got, want)
            if why and _detections(want) is not None:
                # Random-weight detectors tie in score, so which boxes survive top-k and NMS
                # depends on the order of float operations: torch's own compiler may not
                # reproduce eager either. tgraph passes where it matches aot_eager, which
                # differs from eager the same way.
                torch._dynamo.reset()
                with torch.no_grad():
                    peer = torch.compile(model, backend="aot_eager", dynamic=False)(*args, **kwargs)
                if _compare(peer, want) is not None and _compare(got, peer) is None:
                    row["note"] = f"torch.compile's aot_eager differs from eager the same way ({why}); tgraph matches aot_eager"
                    why = None
            _verdict(row, why, left)
            if row["status"] != "fail" and row.get("note"):
                row["why"] = (row["why"] + "; " if row["why"] else "") + row.pop("note")
            if entry == "compile" and isinstance(fast, tgt.TorchModule) and any(
                    spec is None for _, spec in fast._cache.values()):
                why = getattr(fast, "dynamo_reason", None) or "torch.export refused"
                row["why"] = (row["why"] + "; " if row["why"] else "") + f"via TorchDynamo ({why})"
        except Exception as e:  # noqa: BLE001  (the table says why)
            _failed(row, e)
        rows.append(row)
    return rows


# ---- dynamic sizes (issue 22) ------------------------------------------------------------------

def _sizes(family: str, name: str, args, kwargs) -> list | None:
    """The three (batch, length) pairs a --dynamic run feeds, the builder's first with its batch
    made 2 (torch.export fixes a dim it first sees as 1): a length is an image's side, a token or
    audio sequence's length; None where the inputs cannot vary (whisper's features, detection's
    image lists, optical flow's pairs)."""
    import torch
    first = next((v for v in list(args) + list(kwargs.values()) if isinstance(v, torch.Tensor)), None)
    if first is None or name == "whisper" or "raft" in name:
        return None
    n = first.shape[-1]
    if name in FIXED_SIDE or name.startswith("vit_"):  # position tables of one image size
        return [(2, n), (3, n), (5, n)]
    if first.dim() >= 4:  # images (and video): sides a multiple of 16 (downsampling depth)
        return [(2, n), (3, n + 16), (4, n + 32)]
    return [(2, n), (3, n + n // 2), (2, 2 * n + n // 2)]


FIXED_SIDE = {"vit", "deit", "beit"}  # (and torchvision's vit_*): the batch alone varies


def _resized(args, kwargs, b: int, n: int, gen):
    """args and kwargs with every tensor drawn anew at batch b and length n (the last dims that
    had the first tensor's length: an image's two sides, a sequence's or audio's length); token
    ids in the builders' range, attention masks ones with the second row's tail masked."""
    import torch
    from torch.utils._pytree import tree_map
    side = None

    def one(v, name=""):
        nonlocal side
        if not isinstance(v, torch.Tensor):
            return v
        shape = list(v.shape)
        side = side or shape[-1]
        shape[0] = b
        for d in range(len(shape) - 1, 0, -1):
            if shape[d] != side:
                break
            shape[d] = n
        if v.is_floating_point():
            return torch.randn(shape, generator=gen, dtype=v.dtype)
        if "mask" in name and v.dim() == 2:
            m = torch.ones(shape, dtype=v.dtype)
            m[1 % shape[0], shape[1] * 3 // 4:] = 0
            return m
        if not v.any():  # (token type ids of one type)
            return torch.zeros(shape, dtype=v.dtype)
        return torch.randint(3, 100, shape, generator=gen, dtype=v.dtype)
    return tree_map(one, tuple(args)), {k: tree_map(lambda v, k=k: one(v, k), w) for k, w in kwargs.items()}


def run_dynamic(family: str, name: str, entries: list[str]) -> list[dict]:
    """Each entry with dynamic=True at _sizes' three sizes against eager; the executables it
    compiled and tgraph.torch's lines about what it kept."""
    import torch
    torch.set_num_threads(int(os.environ.get("TG_COV_THREADS", 0)) or max(1, os.cpu_count() or 1))
    import tgraph.torch as tgt
    left = _track_left(tgt)
    lines: list[str] = []
    real_line = tgt._report_line

    def report_line(line):
        real_line(line)
        line = line.removeprefix("tgraph: ")[:200]
        if line not in lines:
            lines.append(line)
    tgt._report_line = report_line
    torch.manual_seed(0)
    model, args, kwargs = (build_torchvision if family == "torchvision" else build_transformers)(name)
    model.eval()
    sizes = _sizes(family, name, args, kwargs)
    rows = []
    for entry in entries:
        row = {"model": name, "family": family, "entry": entry, "dynamic": True}
        if sizes is None:
            row.update(status="skip", why="inputs of fixed size")
            rows.append(row)
            continue
        left.clear()
        lines.clear()
        torch._dynamo.reset()
        tgt._REPORTED.clear()
        try:
            fast = tgt.compile(model, dynamic=True) if entry == "compile" else \
                torch.compile(model, backend="tgraph", dynamic=True)
            used = lambda: tgt.stats()["executables"] + tgt.stats()["cache_hits"]  # noqa: E731 (compiled or loaded)
            before = used()
            gen = torch.Generator().manual_seed(1)
            why, calls = None, []
            for b, n in sizes:
                a, k = _resized(args, kwargs, b, n, gen)
                with torch.no_grad():
                    want = model(*a, **k)
                    t = time.time()
                    got = fast(*a, **k)
                calls.append(round(time.time() - t, 2))
                why = why or (lambda w: w and f"{b} x {n}: {w}")(_compare(got, want))
            made = used() - before
            row.update(executables=made, sizes=" / ".join(f"{b}x{n}" for b, n in sizes), calls_s=calls)
            _verdict(row, why, left)
            if row["status"] == "pass":
                row["status"] = "dynamic" if made == 1 else "per size" if made >= len(sizes) else "partly"
                row["why"] = "; ".join(lines) or ("" if made == 1 else "(no line from tgraph: torch specialised a size)")
        except Exception as e:  # noqa: BLE001  (the table says why)
            _failed(row, e)
        rows.append(row)
    return rows


# ---- the driver ----------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="run only models whose name contains one of these")
    ap.add_argument("--family", choices=["torchvision", "transformers"])
    ap.add_argument("--entry", choices=["compile", "backend", "both", "train"], default="both",
                    help="train: one training step through backend=\"tgraph_train\" against eager")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per model (both entry points)")
    ap.add_argument("--jsonl", help="append each result here as it comes")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--include-large", action="store_true", help="also the models in TOO_LARGE")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N): where the models run")
    ap.add_argument("--jobs", type=int, default=1, help="models run at once, each in its own process")
    ap.add_argument("--resume", help="skip the models this JSONL file already has a row for")
    ap.add_argument("--dynamic", action="store_true", help="dynamic=True at three sizes: executables compiled")
    ap.add_argument("--one", nargs=2, metavar=("FAMILY", "NAME"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ["TG_COV_DEVICE"] = a.device
    if a.jobs > 1:  # the CPU cores shared between the models running at once
        os.environ.setdefault("TG_COV_THREADS", str(max(1, (os.cpu_count() or 1) // a.jobs)))
    entries = ["compile", "backend"] if a.entry == "both" else [a.entry]
    if a.dynamic and a.entry == "train":
        ap.error("--dynamic runs the inference entries")
    if a.one:
        for row in (run_dynamic if a.dynamic else run_one)(a.one[0], a.one[1], entries):
            print("RESULT " + json.dumps(row), flush=True)
        return
    todo = []
    if a.family in (None, "torchvision"):
        todo += [("torchvision", n) for n in torchvision_models()]
    if a.family in (None, "transformers"):
        todo += [("transformers", n) for n in HF]
    if a.names:
        todo = [(f, n) for f, n in todo if any(s in n for s in a.names)]
    if a.resume and os.path.exists(a.resume):
        with open(a.resume) as f:
            done = {json.loads(line)["model"] for line in f if line.strip()}
        todo = [(f, n) for f, n in todo if n not in done]
    if a.jobs > 1:  # the slowest first, so that they do not finish alone at the end
        slow = set(TOO_LARGE) | {n for f, n in todo if "rcnn" in n or "retinanet" in n or "fcos" in n or "raft" in n}
        todo.sort(key=lambda fn: fn[1] not in slow)

    def one(fam: str, name: str) -> list[dict]:
        if name in TOO_LARGE and not a.include_large:
            return [{"model": name, "family": fam, "entry": e, "status": "skip",
                     "why": "too large for a 2-core CPU run (--include-large runs it)"} for e in entries]
        t = time.time()
        try:
            p = subprocess.run([sys.executable, __file__, "--one", fam, name, "--entry", a.entry] +
                               (["--dynamic"] if a.dynamic else []),
                               capture_output=True, text=True, timeout=a.timeout)
            got = [json.loads(line[7:]) for line in p.stdout.splitlines() if line.startswith("RESULT ")]
            if not got:
                tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
                got = [{"model": name, "family": fam, "entry": e, "status": "fail",
                        "why": f"the run died (exit {p.returncode}): {tail}"[:300]} for e in entries]
        except subprocess.TimeoutExpired:
            got = [{"model": name, "family": fam, "entry": e, "status": "fail",
                    "why": f"over the {a.timeout} s limit"} for e in entries]
        for r in got:
            r.setdefault("wall_s", round(time.time() - t, 1))
            r["device"] = a.device
        return got

    rows = []
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:  # each result printed and saved as it comes
        for fut in as_completed([pool.submit(one, fam, name) for fam, name in todo]):
            for r in fut.result():
                print(_line(r), flush=True)
                if a.jsonl:
                    with open(a.jsonl, "a") as f:
                        f.write(json.dumps(r) + "\n")
                rows.append(r)
    order = {n: k for k, (_, n) in enumerate(todo)}
    rows.sort(key=lambda r: order[r["model"]])
    print(summary(rows))
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(markdown(rows))


def _line(r: dict) -> str:
    if r.get("dynamic"):
        made = f"{r['executables']} for {r['sizes']}" if "executables" in r else "-"
        return f"{r['model']:<40} {r['entry']:<8} {r['status']:<12} {made:<32} {r.get('why', '')}"
    t = f"{r['first_call_s']:.1f}" if "first_call_s" in r else "-"
    return f"{r['model']:<40} {r['entry']:<8} {r['status']:<12} {t:>7}  {r.get('why', '')}"


def summary(rows: list[dict]) -> str:
    out = []
    for entry in sorted({r["entry"] for r in rows}):
        rs = [r for r in rows if r["entry"] == entry]
        kinds = ("dynamic", "partly", "per size") if any(r.get("dynamic") for r in rs) else ("pass",)
        counts = {s: sum(r["status"] == s for r in rs) for s in kinds + ("partitioned", "fail", "skip")}
        ran, whole = len(rs) - counts["skip"], sum(counts[k] for k in kinds)
        out.append(f"{entry}: {len(rs)} models, " + ", ".join(f"{v} {k}" for k, v in counts.items()) +
                   (f"; entirely in tgraph: {whole}/{ran} ({100 * whole / ran:.0f}%)" if ran else ""))
    return "\n".join(out)


def markdown(rows: list[dict]) -> str:
    if any(r.get("dynamic") for r in rows):
        lines = ["| model | family | entry point | result | executables for the sizes | calls (s) | why |",
                 "|---|---|---|---|---|---|---|"]
        for r in rows:
            made = f"{r['executables']} for {r['sizes']}" if "executables" in r else "-"
            calls = " / ".join(f"{c:.2f}" for c in r.get("calls_s", [])) or "-"
            why = r.get("why", "").replace("|", "\\|")
            lines.append(f"| {r['model']} | {r['family']} | {r['entry']} | {r['status']} | {made} | {calls} | {why} |")
        return "\n".join(lines) + "\n"
    lines = ["| model | family | entry point | result | first call (s) | why |", "|---|---|---|---|---|---|"]
    for r in rows:
        t = f"{r['first_call_s']:.1f}" if "first_call_s" in r else "-"
        why = r.get("why", "").replace("|", "\\|")
        lines.append(f"| {r['model']} | {r['family']} | {r['entry']} | {r['status']} | {t} | {why} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
