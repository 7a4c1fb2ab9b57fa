"""ONNX models exported from PyTorch with dynamic axes (issue 22): sizes the exporter computes by
arithmetic on Shape (a padding up to a multiple, an upsampling to a skip connection's size, a
grid over the feature map) import once as sized_ops and run at every size, against eager
PyTorch on random inputs."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
import tgraph as tg  # noqa: E402

F = torch.nn.functional


class Decoder(torch.nn.Module):
    """A UNet-style step: a strided convolution, a bilinear upsampling to the skip connection's
    size, a nearest upsampling by 2, a coordinate grid of the coarse map, and the input padded
    up to a multiple of 4 rows (Swin's window padding)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.c = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = F.relu(self.a(x))
        z = F.relu(self.b(y))
        up = F.interpolate(z, size=y.shape[-2:], mode="bilinear", align_corners=False)
        near = F.interpolate(z, scale_factor=2, mode="nearest")
        h, w = z.shape[-2:]
        gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack((gx, gy), 0).float()[None]
        padded = F.pad(x, (0, 0, 0, (4 - x.shape[2] % 4) % 4))
        return self.c(up + y), near, z[:, :2] + grid, padded


def test_an_export_with_computed_sizes_runs_every_size_from_one_import(tmp_path):
    torch.manual_seed(0)
    model = Decoder().eval()
    path = str(tmp_path / "decoder.onnx")
    try:
        torch.onnx.export(model, (torch.randn(2, 3, 20, 18),), path, input_names=["x"], opset_version=17,
                          dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}}, dynamo=False)
    except Exception as e:  # noqa: BLE001 - an exporter this torch lacks is not tgraph's failure
        pytest.skip(f"torch.onnx.export (TorchScript) unavailable: {e}")
    imported = tg.onnx.load(path)
    assert [tuple(t.shape) for t in imported.input_types] == [(-1, 3, -1, -1)]
    exe = imported.compile(device="cpu")
    rng = np.random.default_rng(3)
    for shape in [(2, 3, 20, 18), (1, 3, 13, 9), (3, 3, 32, 30)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = exe.run([x])
        with torch.no_grad():
            want = [t.numpy() for t in model(torch.from_numpy(x))]
        for g, w in zip(got, want):
            g = np.asarray(g)
            assert g.shape == w.shape, shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_sizes_computed_in_a_graph_built_by_hand():
    """Graph.pad_sized / reshape_sized over a dynamic feed: one executable, every size."""
    g = tg.Graph()
    x = g.placeholder([-1, -1], tg.f32, "x")
    n = g.slice(g.shape_of(x), [1], [2])
    four = g.constant(np.array([4], np.int64))
    up = g.floor_mod(g.sub(four, g.floor_mod(n, four)), four)
    padded = g.pad_sized(x, g.concat([g.constant(np.zeros(3, np.int64)), up], 0), constant=-1.0)
    flat = g.sized_op("reshape", padded, g.mul(g.slice(g.shape_of(padded), [0], [1]), g.slice(g.shape_of(padded), [1], [2])))
    exe = g.compile({x: tg.TensorType([-1, -1], tg.f32)}, [padded, flat], device="cpu")
    for rows, cols in [(2, 5), (3, 8), (1, 1)]:
        v = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
        want = np.pad(v, ((0, 0), (0, (4 - cols % 4) % 4)), constant_values=-1.0)
        p, f = exe.run([v])
        np.testing.assert_array_equal(np.asarray(p), want)
        np.testing.assert_array_equal(np.asarray(f), want.reshape(-1))
    with pytest.raises(tg.Error, match="depends on tensor values"):
        g.reshape_sized(x, g.placeholder([2], tg.i64, "n"))
