"""8-bit floats from Python: casts, feeds and results (widened to float32 for numpy),
scaled_matmul, and torch._scaled_mm through tgraph.torch."""
import numpy as np
import pytest

import tgraph as tg


def fp8_round(x, mant=3, bias=7):
    """x rounded to E4M3FN (mant 3, bias 7) or E5M2 (mant 2, bias 15): nearest even, saturated
    at the largest finite value, by searching every code."""
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    e, m = (codes & 0x7F) >> mant, codes & ((1 << mant) - 1)
    vals = sign * np.where(e == 0, m * 2.0 ** (1 - bias - mant), ((1 << mant) + m) * 2.0 ** (e - bias - mant))
    vals[(codes & 0x7F) == 0x7F if mant == 3 else e == 31] = np.nan
    keep = np.isfinite(vals)
    finite, even = vals[keep], (codes[keep] & 1) == 0
    top = np.abs(finite).max()
    d = np.abs(finite - np.clip(x, -top, top)[..., None])
    best = d == d.min(-1, keepdims=True)
    return finite[np.where(best & even, 0, np.where(best, 1, 2)).argmin(-1)]


def e4m3_round(x):
    return fp8_round(x)


def test_casts_round_to_nearest_even_and_saturate(rng):
    g = tg.Graph()
    x = g.placeholder([64], tg.f32, "x")
    q = g.cast(x, tg.f8e4m3)
    exe = g.compile([x], [q, g.cast(q, tg.bf16)], device="cpu")
    xv = (rng.standard_normal(64) * 100).astype(np.float32)
    xv[:3] = [1000.0, -1e9, 1.0625]
    got, via_bf16 = exe.run([xv])
    assert got.dtype == np.float32  # widened for numpy
    np.testing.assert_array_equal(got, e4m3_round(xv.astype(np.float64)))
    np.testing.assert_array_equal(via_bf16, got)
    assert got[0] == 448 and got[1] == -448 and got[2] == 1.0


def test_float8_feeds_and_arithmetic_errors(rng):
    g = tg.Graph()
    a = g.placeholder([4, 16], tg.f8e4m3, "a")
    b = g.placeholder([8, 16], "f8e5m2", "b")
    with pytest.raises(tg.Error, match=r"\[add\] does not take f8e4m3"):
        g.add(a, a)
    s = g.scalar(0.5)
    y = g.scaled_matmul(a, b, s, s, tg.f32, transpose_b=True)
    exe = g.compile([a, b], [y], device="cpu")
    av = rng.uniform(-3, 3, (4, 16)).astype(np.float32)
    bv = rng.uniform(-3, 3, (8, 16)).astype(np.float32)
    (out,) = exe.run([av, bv])  # float32 arrays narrowed to the feeds' 8-bit types
    a8, b8 = fp8_round(av.astype(np.float64)), fp8_round(bv.astype(np.float64), 2, 15)
    np.testing.assert_allclose(out, 0.25 * a8 @ b8.T, rtol=1e-5, atol=1e-5)


def test_torch_scaled_mm_runs_as_scaled_matmul():
    torch = pytest.importorskip("torch")
    import tgraph.torch as tgt

    class Fp8Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            w = torch.empty(32, 64).uniform_(-2, 2)
            self.w8 = torch.nn.Parameter(w.to(torch.float8_e4m3fn), requires_grad=False)
            self.sw = torch.nn.Parameter(torch.tensor(0.5), requires_grad=False)

        def forward(self, x):
            sx = x.abs().amax() / 448
            x8 = (x / sx).to(torch.float8_e4m3fn)
            return torch._scaled_mm(x8, self.w8.t(), scale_a=sx.float(), scale_b=self.sw, out_dtype=torch.float32)

    m = Fp8Linear().eval()
    x = torch.randn(16, 64)
    try:
        want = m(x)
    except (RuntimeError, NotImplementedError) as e:  # no CPU kernel in this torch
        want = None
        reason = str(e)
    fast = tgt.compile(m)
    got = fast(x)
    x8 = (x / (x.abs().amax() / 448)).to(torch.float8_e4m3fn).float()
    ref = (x8.double() @ m.w8.float().double().t()) * float(x.abs().amax() / 448) * 0.5
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-4)
    if want is not None:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    else:
        assert reason


def test_float8_tensors_cross_dlpack_with_torch():
    torch = pytest.importorskip("torch")
    for tdt, gdt in ((torch.float8_e4m3fn, tg.f8e4m3), (torch.float8_e5m2, tg.f8e5m2)):
        x = (torch.randn(4, 16) * 50).to(tdt)
        d = tg.from_dlpack(x)  # no copy: same bytes, tgraph's 8-bit dtype
        assert d.dtype == gdt and tuple(d.shape) == (4, 16)
        back = torch.from_dlpack(d)
        assert back.dtype == tdt and torch.equal(back.view(torch.uint8), x.view(torch.uint8))
