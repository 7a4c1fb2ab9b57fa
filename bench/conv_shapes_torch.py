"""PyTorch's cuDNN convolutions at ResNet-50's batch-256 shapes (bf16, channels_last): forward,
data gradient and weight gradient per call, CUDA events, median of 20 after warm-up
(wall_timing.cuda_event_ms). The peer of
the convolution rows of a TGRAPH_PROFILE=1 run of bench_train_resnet.
Usage: python3 bench/conv_shapes_torch.py [--benchmark]"""
import sys

import torch

from wall_timing import cuda_event_ms

SHAPES = [  # (name, C_in, C_out, k, stride, H)
    ("stem 7x7/2 3->64 @224", 3, 64, 7, 2, 224),
    ("3x3 64->64 @56", 64, 64, 3, 1, 56),
    ("1x1 256->64 @56", 256, 64, 1, 1, 56),
    ("1x1 64->256 @56", 64, 256, 1, 1, 56),
    ("3x3 128->128 @28", 128, 128, 3, 1, 28),
    ("3x3 256->256 @14", 256, 256, 3, 1, 14),
    ("1x1 1024->256 @14", 1024, 256, 1, 1, 14),
    ("3x3 512->512 @7", 512, 512, 3, 1, 7),
]


def main():
    torch.backends.cudnn.benchmark = "--benchmark" in sys.argv
    n = 256
    for name, ci, co, k, s, h in SHAPES:
        x = torch.randn(n, ci, h, h, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
        w = torch.randn(co, ci, k, k, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
        p = k // 2
        y = torch.nn.functional.conv2d(x, w, stride=s, padding=p)
        dy = torch.randn_like(y)
        fwd = cuda_event_ms(lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p), 20)
        dgrad = cuda_event_ms(lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0],
                                                               1, [True, False, False]), 20)
        wgrad = cuda_event_ms(lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0],
                                                               1, [False, True, False]), 20)
        flop = 2 * n * y.shape[2] * y.shape[3] * co * ci * k * k
        print(f"{name}: fwd {fwd * 1e3:.0f} us ({flop / fwd / 1e9:.0f} TFLOP/s), dgrad {dgrad * 1e3:.0f} us, "
              f"wgrad {wgrad * 1e3:.0f} us", flush=True)


if __name__ == "__main__":
    main()
