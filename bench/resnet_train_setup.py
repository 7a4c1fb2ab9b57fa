"""The ResNet-50 training step the benchmarks share (bench/first_step.py, train_memory.py,
kernel_breakdown.py): torchvision ResNet-50 (random weights), random data, SGD momentum 0.9,
bf16 autocast, as bench/train_models.py runs it — through torch.compile(backend="tgraph_train")
on the unchanged NCHW model, or eager / inductor with channels_last."""
import torch
import torchvision

import tgraph.torch  # noqa: F401  (registers the backends)


def resnet50_training(batch: int, path: str = "tgraph_train", precision: str = "bf16"):
    """(model, x, y, opt, run, step): run is the model as the path runs it, step() one training
    step returning its loss. path: tgraph_train, eager or inductor; precision: bf16 (autocast)
    or tf32 (f32 weights and activations, TF32 matmuls and convolutions allowed)."""
    torch.manual_seed(0)
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    model = torchvision.models.resnet50().cuda()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    if path == "tgraph_train":
        run = torch.compile(model, backend="tgraph_train", dynamic=False)
    else:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
        run = torch.compile(model) if path == "inductor" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        with torch.autocast("cuda", torch.bfloat16, enabled=not tf32):
            loss = torch.nn.functional.cross_entropy(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return model, x, y, opt, run, step
