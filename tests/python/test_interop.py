"""numpy / DLPack / PyTorch exchange, device tensors, and ONNX import from Python."""
import os

import numpy as np
import pytest

import tgraph as tg

ONNX_NODE = "/usr/share/libonnx-testdata/data/node"


def test_dlpack_round_trip_with_numpy_shares_memory(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = tg.from_dlpack(a)  # numpy implements __dlpack__: no copy
    assert t.shape == (3, 4) and t.dtype == tg.f32 and t.device == tg.Device.cpu()
    back = np.from_dlpack(t)
    np.testing.assert_array_equal(back, a)
    a[0, 0] = 42.0  # the same memory all the way through
    assert back[0, 0] == 42.0


def test_device_tensors_through_run_device(rng):
    g = tg.Graph()
    x = g.placeholder([2, 3], tg.f32, "x")
    exe = g.compile([x], [g.exp(x)], device="cpu")
    a = rng.standard_normal((2, 3)).astype(np.float32)
    (out,) = exe.run_device([tg.DeviceTensor(a, tg.Device.cpu())])
    assert isinstance(out, tg.DeviceTensor)
    np.testing.assert_allclose(out.numpy(), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(np.from_dlpack(out), np.exp(a), rtol=1e-6)


def test_unsupported_dlpack_input_is_an_error():
    with pytest.raises((tg.Error, TypeError, BufferError)):
        tg.from_dlpack(np.zeros(3, np.complex64))
    with pytest.raises(tg.Error):
        tg.from_dlpack(np.zeros((4, 4), np.float32)[:, ::2])  # not row-major compact


def test_torch_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(rng.standard_normal((4, 5)).astype(np.float32))
    g = tg.Graph()
    x = g.placeholder([4, 5], tg.f32, "x")
    exe = g.compile([x], [g.tanh(x) * 2], device="cpu")
    (out,) = exe.run_device([tg.from_dlpack(a)])
    got = torch.from_dlpack(out)
    torch.testing.assert_close(got, torch.tanh(a) * 2)
    assert tg.dtype(torch.bfloat16) == tg.bf16


@pytest.mark.skipif(not tg.onnx.available or not os.path.isdir(ONNX_NODE), reason="no ONNX test data")
def test_onnx_import_runs_a_model(rng):
    m = tg.onnx.load(os.path.join(ONNX_NODE, "test_conv_with_strides_padding", "model.onnx"))
    assert m.opset > 0 and m.op_histogram.get("Conv") == 1
    exe = m.compile(device="cpu")
    assert len(m.inputs) == 2 and len(m.outputs) == 1
    x = rng.standard_normal(tuple(m.input_types[0].shape)).astype(np.float32)
    w = rng.standard_normal(tuple(m.input_types[1].shape)).astype(np.float32)
    (y,) = exe.run([x, w])
    # ONNX Conv: NCHW x, OIHW w, stride 2, pads 1
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    oh, ow = y.shape[2:]
    ref = np.zeros_like(y)
    for i in range(oh):
        for j in range(ow):
            ref[:, :, i, j] = np.tensordot(xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3], w, ([1, 2, 3], [1, 2, 3]))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(tg.Error):
        tg.onnx.load("/no/such/model.onnx")


def test_dlpack_capsule_is_taken_once(rng):
    """A bare DLPack capsule (torch.utils.dlpack.to_dlpack) is taken without a copy, and only
    once: a used capsule is refused."""
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(rng.standard_normal((3, 5)).astype(np.float32))
    cap = torch.utils.dlpack.to_dlpack(a)
    t = tg.from_dlpack(cap)
    assert t.shape == (3, 5) and t.dtype == tg.f32
    a[1, 2] = 7.0  # the same memory
    np.testing.assert_array_equal(t.numpy(), a.numpy())
    with pytest.raises(Exception):
        tg.from_dlpack(cap)
