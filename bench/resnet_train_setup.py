"""The training step bench/first_step.py and bench/train_memory.py measure: torchvision
ResNet-50 (random weights), random data, SGD momentum 0.9, bf16 autocast, through
torch.compile(backend="tgraph_train"), as bench/train_models.py runs it."""
import torch
import torchvision

import tgraph.torch  # noqa: F401  (registers the backends)


def tgraph_train_resnet50(batch: int):
    """(model, x, y, opt, run, step): run is the compiled model, step() one training step."""
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = torch.compile(model, backend="tgraph_train", dynamic=False)

    def step():
        with torch.autocast("cuda", torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return model, x, y, opt, run, step
