"""tgraph.torch with dynamic sizes (issue 22): graphs torch traces with symbolic sizes compile
into one tgraph executable that runs at every size, against eager PyTorch on random inputs;
tgraph.torch.stats()["executables"] counts the compiles."""
import math

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
import tgraph.torch as tgt  # noqa: E402


def compiles():
    return tgt.stats()["executables"]


def through(model, entry):
    """model through tgraph.torch.compile ("export") or torch.compile with tgraph's backend
    ("dynamo"), sizes dynamic."""
    return tgt.compile(model, dynamic=True) if entry == "export" else \
        torch.compile(model, backend="tgraph", dynamic=True)


class ConvNet(nn.Module):
    """Convolutions, batch norm, pooling and a flatten whose batch (and image size) vary."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(torch.flatten(self.body(x), 1))


class Attention(nn.Module):
    """Batch x sequence folded into one dim and back, heads split from the features, a
    position table sliced to the sequence length, a mask broadcast over heads."""

    def __init__(self, d=32, heads=4, max_len=64):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.pos = nn.Parameter(torch.randn(max_len, d) * 0.1)

    def forward(self, x, mask):
        b, s, d = x.shape
        x = x + self.pos[:s]
        q, k, v = self.qkv(x.reshape(b * s, d)).reshape(b, s, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        bias = torch.zeros(b, 1, 1, s).masked_fill(mask[:, None, None, :] == 0, -1e9)
        y = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + bias, -1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, d)) + torch.arange(s).float()[None, :, None] * 0.01


def attention_inputs(b, s, gen):
    mask = torch.ones(b, s, dtype=torch.long)
    mask[0, s // 2:] = 0
    return torch.randn(b, s, 32, generator=gen), mask


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_one_executable_for_every_size(entry):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    for model, sizes, inputs in [
            (ConvNet().eval(), [(2, 16), (3, 16), (5, 24), (4, 20)], lambda b, hw: (torch.randn(b, 3, hw, hw, generator=gen),)),
            (Attention().eval(), [(2, 8), (3, 5), (4, 11), (2, 16)], lambda b, s: attention_inputs(b, s, gen))]:
        fast = tgt.compile(model, dynamic=True) if entry == "export" else \
            torch.compile(model, backend="tgraph", dynamic=True)
        before = compiles()
        with torch.no_grad():
            for size in sizes:
                args = inputs(*size)
                torch.testing.assert_close(fast(*args), model(*args), rtol=1e-4, atol=1e-4,
                                           msg=f"{type(model).__name__} at {size}")
        assert compiles() - before == 1, f"{type(model).__name__}: {compiles() - before} executables for {len(sizes)} sizes"


def test_mark_dynamic_keeps_one_dim_symbolic():
    torch.manual_seed(0)
    model = Attention().eval()
    fast = torch.compile(model, backend="tgraph")
    gen = torch.Generator().manual_seed(2)
    before = compiles()
    with torch.no_grad():
        for b in (2, 3, 6):
            x, mask = attention_inputs(b, 7, gen)
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(mask, 0)
            torch.testing.assert_close(fast(x, mask), model(x, mask), rtol=1e-4, atol=1e-4)
    assert compiles() - before == 1


def test_static_compile_still_specialises():
    """Without dynamic=True nothing changes: one executable per input size."""
    model = ConvNet().eval()
    fast = tgt.compile(model)
    before = compiles()
    with torch.no_grad():
        for b in (2, 3):
            x = torch.randn(b, 3, 16, 16)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    assert compiles() - before == 2


def test_a_channels_last_flatten_stays_dynamic():
    """A channels-last convolution network's flatten after its pooling reaches tgraph as
    as_strided(mean, [s0, C, 1, 1], ...) on the CPU: a reshape with a symbolic size, kept
    dynamic (it compiled per size)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 4)).eval().to(memory_format=torch.channels_last)
    fast = tgt.compile(model, dynamic=True)
    before = compiles()
    with torch.no_grad():
        for b in (4, 2, 7):
            x = torch.randn(b, 3, 12, 12).contiguous(memory_format=torch.channels_last)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    assert compiles() - before == 1


class ChannelShuffle(nn.Module):
    """A strided convolution, then views of its derived sizes ((h - 1) // 2 + 1): a channel
    shuffle (ShuffleNet) and a Linear over channels-last pixels (ConvNeXt: [b*h*w, c] back to
    [b, h, w, c]). tgraph names those sizes by the dims of tensors that have them."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        y = self.conv(x)
        b, c, h, w = y.shape
        y = y.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)
        return self.fc(y.permute(0, 2, 3, 1))


def test_views_of_derived_sizes_stay_dynamic():
    torch.manual_seed(0)
    model = ChannelShuffle().eval()
    fast = tgt.compile(model, dynamic=True)
    before = compiles()
    with torch.no_grad():
        for b, h, w in ((2, 9, 12), (3, 16, 7), (5, 10, 10)):
            x = torch.randn(b, 3, h, w)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    assert compiles() - before == 1


def test_a_free_image_size_tgraph_cannot_keep_still_keeps_the_batch(capsys, monkeypatch):
    """Adaptive max pooling of a free image size takes as many taps per window as the size
    makes: every dim dynamic fails, the batch alone does not — one executable per image size,
    each for every batch size, with a line that says so."""
    monkeypatch.setattr(tgt, "_REPORTED", set())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveMaxPool2d((3, 3)), nn.Flatten(), nn.Linear(36, 5)).eval()
    fast = tgt.compile(model, dynamic=True)
    before = compiles()
    with torch.no_grad():
        for b, s in ((2, 11), (3, 11), (6, 11), (2, 14), (4, 14)):
            x = torch.randn(b, 3, s, s)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    assert "only the batch size kept dynamic" in capsys.readouterr().err
    assert compiles() - before == 2


class EndsOfADynamicDim(nn.Module):
    """Indices from the end of a dynamic dim (the last step, all but the last, the last three:
    wav2vec2's positional convolution trims x[:, :, :-1]) and a size torch fixes that tgraph
    infers dynamic (x[:, -3:] is 3 long)."""

    def forward(self, x):
        return x[:, -1] * 2 + x[:, 0:-1].sum(1) + x[:, -3:].mean(1) + x[:, -3:][:, 1] + \
            x[:, :x.shape[1] + 1].amax(1)  # (an end past the size: a decoder's mask slice)


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_indices_from_the_end_of_a_dynamic_dim(entry):
    model = EndsOfADynamicDim()
    fast = through(model, entry)
    before = compiles()
    with torch.no_grad():
        for b, n in ((2, 5), (3, 9), (4, 7)):
            x = torch.randn(b, n, 4)
            torch.testing.assert_close(fast(x), model(x))
    assert compiles() - before == 1


class SizesAsNumbers(nn.Module):
    """Sizes used as numbers: a padding by the batch size up to a multiple of 4, a product of
    sizes in a view, a range to 2n + 1, a slice from n // 2, the batch size as a factor and as a
    repeat count (Bloom's ALiBi table). tgraph
    computes them in the graph (sized ops), known per size: one executable."""

    def forward(self, x):
        n = x.shape[0]
        p = nn.functional.pad(x, (0, (4 - n % 4) % 4))
        flat = p.reshape(p.shape[0] * p.shape[1])
        return flat * n, torch.arange(2 * n + 1, dtype=x.dtype), x[n // 2:] * 2, x[:1].repeat(n, 2)


class AdaptiveMaxOverADynamicDim(nn.Module):
    """Adaptive max pooling over the dynamic dim: its taps per window depend on the size, which
    tgraph does not compute in the graph, so this model compiles per size, with a line that says
    why."""

    def forward(self, x):
        return nn.functional.adaptive_max_pool1d(x.T[None], 2)


class SizeOfASlice(nn.Module):
    """A range of n - 1 values against x[1:]: the size n - 1 is no fed tensor's dim, but it is
    the slice's, which names it."""

    def forward(self, x):
        n = x.shape[0]
        return x[1:] * torch.arange(1, n, dtype=x.dtype)[:, None]


def compiles_over_three_sizes(model, entry) -> int:
    """Executables compiled while `model` through `entry` (tgraph.torch.compile or torch.compile
    with tgraph's backend, dynamic) runs [n, 3] inputs of three sizes, each against eager."""
    fast = through(model, entry)
    before = compiles()
    with torch.no_grad():
        for n in (4, 6, 9):
            x = torch.randn(n, 3)
            torch.testing.assert_close(fast(x), model(x))
    return compiles() - before


def compiles_over(model, entry, shapes, seed, rtol=1e-4, atol=1e-5) -> int:
    """Executables compiled while `model` through `entry` runs random inputs of `shapes`, each
    output (a tensor or a tuple of them) against eager's."""
    fast = through(model, entry)
    gen = torch.Generator().manual_seed(seed)
    before = compiles()
    with torch.no_grad():
        for shape in shapes:
            x = torch.randn(*shape, generator=gen)
            got, want = fast(x), model(x)
            pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
            for a, b in pairs:
                torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=str(shape))
    return compiles() - before


def trains_like_eager(make, batches) -> int:
    """Executables compiled while a model from `make` trains through tgraph_train, sizes dynamic,
    on each input tuple of `batches`: its loss (its output, or a tensor output's mean square) and
    every gradient against an eager copy's."""
    torch.manual_seed(0)
    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    fast = torch.compile(model, backend="tgraph_train", dynamic=True)
    before = compiles()
    for args in batches:
        model.zero_grad()
        ref.zero_grad()
        loss, want = fast(*args), ref(*args)
        if loss.dim():
            loss, want = loss.square().mean(), want.square().mean()
        loss.backward()
        want.backward()
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5,
                                       msg=f"{name} at {[list(a.shape) for a in args]}")
    return compiles() - before


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_sizes_used_as_numbers_stay_dynamic(capsys, entry):
    assert compiles_over_three_sizes(SizesAsNumbers(), entry) == 1
    assert "compiling per size" not in capsys.readouterr().err


class ViewAtASizedOffset(nn.Module):
    """An output that is a view of the input at an offset that depends on its size."""

    def forward(self, x):
        return x[x.shape[0] // 2:]


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_a_view_of_an_input_at_a_sized_offset_has_the_right_values(entry):
    """Through TorchDynamo, AOTAutograd rebuilds an output aliasing an input from the returned
    tensor's offset: tgraph's own result (offset 0) gave x[:k] for x[n // 2:] (a wrong answer, per
    size too, before session 38); torch now makes that view."""
    assert compiles_over_three_sizes(ViewAtASizedOffset(), entry) >= 1


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_a_size_made_from_another_is_named_by_a_tensor_that_has_it(entry):
    assert compiles_over_three_sizes(SizeOfASlice(), entry) == 1


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_a_size_tgraph_cannot_name_compiles_per_size(capsys, monkeypatch, entry):
    """The fallback compiles each size whole (nothing is left to PyTorch)."""
    monkeypatch.setattr(tgt, "_REPORTED", set())  # the line is printed once per process: this test's
    made = compiles_over_three_sizes(AdaptiveMaxOverADynamicDim(), entry)
    err = capsys.readouterr().err
    if entry == "export":  # (the line is printed once per process)
        assert "dynamic sizes not kept, compiling per size" in err
    assert "left to PyTorch" not in err
    assert made == 3


def test_gradients_through_a_dynamic_training_graph():
    """tgraph_train with dynamic=True: forward and backward keep the batch symbolic; gradients
    match eager's at every batch size."""
    torch.manual_seed(0)
    model = Attention()
    ref = Attention()
    ref.load_state_dict(model.state_dict())
    fast = torch.compile(model, backend="tgraph_train", dynamic=True)
    gen = torch.Generator().manual_seed(3)
    before = compiles()
    for b, s in [(2, 6), (3, 9), (5, 4)]:
        x, mask = attention_inputs(b, s, gen)
        model.zero_grad()
        ref.zero_grad()
        fast(x, mask).square().mean().backward()
        ref(x, mask).square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=f"{name} at {b}x{s}")
    assert compiles() - before == 2  # the forward and the backward, once each


class AdaptiveHead(nn.Module):
    """A VGG-style head: convolutions, then adaptive average pooling to a fixed 3 x 2 (and a
    global one) of an image whose size varies, so its windows do: computed in the graph."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 3 * 2 + 4, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        pooled = nn.functional.adaptive_avg_pool2d(y, (3, 2))
        return self.fc(torch.cat([torch.flatten(pooled, 1), torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1)], 1))


# image sizes: windows that overlap (7 -> 3), split evenly (6 -> 3, 4 -> 2), repeat (2 -> 3)
ADAPTIVE_SIZES = [(2, 7, 5), (3, 6, 4), (2, 2, 9), (4, 11, 2)]


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_adaptive_pooling_of_a_free_image_size_is_one_executable(capsys, entry):
    torch.manual_seed(0)
    assert compiles_over(AdaptiveHead().eval(), entry, [(b, 3, h, w) for b, h, w in ADAPTIVE_SIZES], 6) == 1
    assert "per size" not in capsys.readouterr().err


def test_adaptive_pooling_gradients_at_every_image_size():
    """The backward of adaptive average pooling over a dynamic image (the forward's weights
    transposed) against eager's, one forward and one backward executable."""
    torch.manual_seed(0)
    model, ref = AdaptiveHead(), AdaptiveHead()
    ref.load_state_dict(model.state_dict())
    fast = torch.compile(model, backend="tgraph_train", dynamic=True)
    gen = torch.Generator().manual_seed(7)
    before = compiles()
    for b, h, w in ADAPTIVE_SIZES:
        x = torch.randn(b, 3, h, w, generator=gen)
        model.zero_grad()
        ref.zero_grad()
        fast(x).square().mean().backward()
        ref(x).square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=f"{name} at {b}x{h}x{w}")
    assert compiles() - before == 2


class Upsamplings(nn.Module):
    """A decoder's upsamplings of an image whose size varies: nearest-exact by 2 and by 1.5
    (torch's decomposition computes a float scale from the sizes), nearest and bilinear to another
    tensor's size; and a fixed grid (a ViT's position table) bicubic to the image's size, as
    DINOv2 and ViT's interpolate_pos_encoding do."""

    def __init__(self):
        super().__init__()
        self.grid = nn.Parameter(torch.randn(1, 3, 4, 4))

    def forward(self, x, skip):
        up = nn.functional.interpolate(x, scale_factor=2, mode="nearest-exact")
        third = nn.functional.interpolate(x, scale_factor=1.5, mode="nearest-exact")
        near = nn.functional.interpolate(x, size=skip.shape[2:], mode="nearest")
        lin = nn.functional.interpolate(x, size=skip.shape[2:], mode="bilinear", align_corners=False)
        pos = nn.functional.interpolate(self.grid, size=x.shape[2:], mode="bicubic", align_corners=False)
        return up + skip, near * lin, x + pos, third


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_upsamplings_of_a_free_image_size_are_one_executable(capsys, entry):
    torch.manual_seed(0)
    model = Upsamplings().eval()
    fast = through(model, entry)
    gen = torch.Generator().manual_seed(8)
    before = compiles()
    with torch.no_grad():
        for b, h, w in [(2, 5, 6), (3, 7, 4), (2, 4, 9)]:
            x, skip = torch.randn(b, 3, h, w, generator=gen), torch.randn(b, 3, 2 * h, 2 * w, generator=gen)
            for y, r in zip(fast(x, skip), model(x, skip)):
                torch.testing.assert_close(y, r, rtol=1e-5, atol=1e-5, msg=f"{b}x{h}x{w}")
    assert compiles() - before == 1
    assert "per size" not in capsys.readouterr().err


class SizeMathInPython(nn.Module):
    """A size computed in Python: int(ceil(n / 2)) becomes a plain number in the trace (3 for
    n = 5 or 6), held by a guard torch records; the padding to 2k rows is n's. At n = 8 that
    graph would crop two rows and view the rest as [3, 8]: a wrong answer, not an error."""

    def forward(self, x):
        k = int(math.ceil(x.shape[0] / 2))
        return nn.functional.pad(x, (0, 0, 0, 2 * k - x.shape[0])).reshape(k, 8) * 2


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_a_size_torch_guards_is_checked_before_a_run(entry):
    """torch.export's shape guards (beyond each size's range) decide which sizes an executable
    takes: 5 shares 6's executable (the same k), 8 and 7 get one of their own, each right.
    (TorchDynamo keeps k symbolic, ceil(n / 2) computed in the graph: one executable.)"""
    model = SizeMathInPython()
    fast = through(model, entry)
    made = []
    with torch.no_grad():
        for n in (6, 5, 8, 7):
            before = compiles()
            x = torch.randn(n, 4)
            torch.testing.assert_close(fast(x), model(x), msg=f"n = {n}")
            made.append(compiles() - before)
    assert made == ([1, 0, 1, 0] if entry == "export" else [1, 0, 0, 0])


class BranchOnASize(nn.Module):
    """A branch on one size (torch records `n != 5` when it traces 6) and a second input twice
    the first's length (its dim is `2 n`, no symbol of its own)."""

    def forward(self, x, y):
        z = x * 3 if x.shape[0] == 5 else x * 2
        return z + y[: x.shape[0]] + y[x.shape[0]:]


def test_guards_on_one_size_and_on_a_derived_input_dim():
    """An executable traced at 6 takes 7 (one executable), not 5 (its other branch: exported
    again); an input whose dim is twice the other's stays one executable, its relation checked
    (a y of another length is exported again, and torch refuses it)."""
    model = BranchOnASize()
    fast = tgt.compile(model, dynamic=True)
    made = []
    with torch.no_grad():
        for n in (6, 7, 5, 4):
            before = compiles()
            x, y = torch.randn(n, 3), torch.randn(2 * n, 3)
            torch.testing.assert_close(fast(x, y), model(x, y), msg=f"n = {n}")
            made.append(compiles() - before)
        assert made == [1, 0, 1, 0]
        with pytest.raises(Exception):  # y not twice x: no executable takes it, and torch.export says why
            fast(torch.randn(6, 3), torch.randn(11, 3))


def test_adaptive_pooling_of_an_unbatched_free_image():
    """(C, H, W) without a batch: the pooled axes are the last ones."""
    model = nn.AdaptiveAvgPool2d((3, 2))
    fast = tgt.compile(model, dynamic=True)
    before = compiles()
    with torch.no_grad():
        for s in ((4, 7, 5), (4, 9, 6), (4, 11, 3)):
            x = torch.randn(*s)
            torch.testing.assert_close(fast(x), model(x))
    assert compiles() - before == 1


class Box:
    """An output type torch.export does not know (as a decoder's cache object)."""

    def __init__(self, t):
        self.t = t


class ReturnsAnObject(nn.Module):
    def forward(self, x):
        return Box(torch.relu(x) * x.shape[0] + x.sum(0))


def test_a_model_export_refuses_keeps_its_sizes_through_torchdynamo(capsys):
    """torch.export fails whatever the sizes (an output of a type it does not know): the module
    goes through TorchDynamo once, whose graphs keep the sizes symbolic — one executable for
    every size, and no export tried again at each new size."""
    model = ReturnsAnObject()
    fast = tgt.compile(model, dynamic=True)
    before = compiles()
    with torch.no_grad():
        for n in (2, 3, 5, 9):
            x = torch.randn(n, 4)
            torch.testing.assert_close(fast(x).t, model(x).t)
    assert compiles() - before == 1
    assert "through TorchDynamo" in capsys.readouterr().err


def test_a_first_call_of_size_one_does_not_fix_the_rest():
    """torch.export fixes a dim whose example size is 1: that executable takes batch 1 only, and
    a later batch of 4 gets its own symbolic one (not an error), which serves batch 6 too."""
    torch.manual_seed(0)
    model = Attention().eval()
    fast = tgt.compile(model, dynamic=True)
    gen = torch.Generator().manual_seed(4)
    before = compiles()
    with torch.no_grad():
        for b, s in [(1, 6), (4, 6), (6, 9), (1, 3)]:
            x, mask = attention_inputs(b, s, gen)
            torch.testing.assert_close(fast(x, mask), model(x, mask), rtol=1e-4, atol=1e-4, msg=f"{b}x{s}")
    assert compiles() - before == 2


class PositionTable(nn.Module):
    """A learned position table of 12 rows: torch.export bounds the sequence by it."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(12, 8)

    def forward(self, x):
        return x + self.pos(torch.arange(x.shape[1]))[None]


def test_sizes_of_one_run_in_the_executable_export_made():
    """torch.export's assumptions are checked at each call as its own program checks them: a
    batch or sequence of 1 (export's default range starts at 2, which its module does not
    enforce) runs in the same executable and matches eager; a sequence past the 12-row table
    raises an error instead of reading past it."""
    model = PositionTable().eval()
    fast = tgt.compile(model, dynamic=True)
    before = compiles()
    with torch.no_grad():
        for b, s in [(2, 5), (3, 12), (1, 4)]:
            x = torch.randn(b, s, 8)
            torch.testing.assert_close(fast(x), model(x))
        x = torch.randn(2, 1, 8)
        torch.testing.assert_close(fast(x), model(x))
        assert compiles() - before == 1  # batch 1 and sequence 1 in the same executable
        with pytest.raises(Exception):
            fast(torch.randn(2, 13, 8))


class Video(nn.Module):
    """Convolutions over clips (conv3d: strided, padded, dilated in time) whose batch, frame
    count and image size vary."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv3d(3, 8, (3, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1))
        self.b = nn.Conv3d(8, 8, (3, 1, 1), stride=(2, 1, 1), padding=(1, 0, 0))
        self.c = nn.Conv3d(8, 4, (2, 3, 3), dilation=(2, 1, 1))
        self.max = nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
        self.avg = nn.AvgPool3d((1, 2, 2), stride=(1, 2, 2))

    def forward(self, x):  # (pooling first: torch cannot tell a late pooling's input is never too small)
        return self.c(self.max(torch.relu(self.b(torch.relu(self.a(self.avg(x)))))))


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_a_video_models_every_clip_size_is_one_executable(capsys, entry):
    """conv3d runs as conv2d over gathered frames, 3-D pooling as two 2-D poolings; their reshapes
    take the batch times the output frames and the image size from the graph at each size (were
    one executable per clip size, and the pooling's reshape refused a varying size)."""
    torch.manual_seed(0)
    clips = [(2, 3, 8, 48, 40), (3, 3, 10, 40, 56), (4, 3, 12, 64, 48)]
    assert compiles_over(Video().eval(), entry, clips, 7, atol=1e-4) == 1
    assert "per size" not in capsys.readouterr().err


class Resample(nn.Module):
    """grid_sample of an image by a grid of sample points, both of sizes that vary."""

    def forward(self, x, grid):
        return nn.functional.grid_sample(x, grid, align_corners=False)


def test_grid_sampling_of_a_varying_image_size_computes_eagers_values():
    """grid_sample's taps use the image's size as a number: a varying one is refused there (the
    model then keeps the batch dynamic, one executable per image size), never sampled with -1."""
    model = Resample().eval()
    fast = tgt.compile(model, dynamic=True)
    gen = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for b, h, w, ho, wo in [(2, 12, 16, 5, 7), (3, 20, 14, 6, 4), (4, 12, 16, 5, 7)]:
            x = torch.randn(b, 3, h, w, generator=gen)
            grid = torch.rand(b, ho, wo, 2, generator=gen) * 2.2 - 1.1
            torch.testing.assert_close(fast(x, grid), model(x, grid), rtol=1e-4, atol=1e-5, msg=f"{b}x{h}x{w}")


class Spread(nn.Module):
    """Variances over a dim whose size varies (the correction's n is that size)."""

    def forward(self, x):
        return torch.var(x, dim=1), torch.var(x, dim=(0, 2), correction=2), x.std(dim=-1, keepdim=True)


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_variances_over_a_varying_dim_correct_by_its_size(entry):
    """torch.var's correction n / (n - c) takes n at each size (it was a product of -1s: a wrong
    factor, silently)."""
    assert compiles_over(Spread(), entry, [(2, 5, 7), (3, 9, 4), (4, 6, 11)], 9) == 1


class NormedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))


def test_a_training_batch_norms_running_variance_at_every_size():
    """tgraph_train, sizes dynamic: the running variance takes the batch variance times
    n / (n - 1) with n the batch's elements per channel at each size, as eager's does."""
    torch.manual_seed(0)
    model, ref = NormedNet(), NormedNet()
    ref.load_state_dict(model.state_dict())
    fast = torch.compile(model, backend="tgraph_train", dynamic=True)
    gen = torch.Generator().manual_seed(10)
    for b, h, w in [(2, 6, 5), (3, 4, 7), (5, 8, 6)]:
        x = torch.randn(b, 3, h, w, generator=gen)
        fast(x).square().mean().backward()
        ref(x).square().mean().backward()
        torch.testing.assert_close(model.bn.running_var, ref.bn.running_var, rtol=1e-5, atol=1e-6,
                                   msg=f"{b}x{h}x{w}")
        torch.testing.assert_close(model.bn.running_mean, ref.bn.running_mean, rtol=1e-5, atol=1e-6)


class Halves(nn.Module):
    """Splits along a dim whose size varies: into chunks of a fixed size (torch guards their
    count), and into sizes computed from the size."""

    def forward(self, x):
        a, b, *rest = torch.split(x, 4, dim=1)
        n = x.shape[2]
        left, right = torch.split(x, [n // 2, n - n // 2], dim=2)
        return a * 2, b.sum(1), rest[-1].mean(1), left.amax(2), right - 1


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_splits_of_a_varying_dim(entry):
    """torch.split by a chunk size over a dim that varies was cut by the -1 itself (a piece of
    size 3 of any size); by sizes computed from the size it took torch's sizes as numbers."""
    assert compiles_over(Halves(), entry, [(2, 10, 6), (3, 11, 9), (4, 12, 8)], 11) == 1


class FusedAttention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, s, d)


def test_training_through_fused_attention_at_every_length():
    """tgraph_train, sizes dynamic, over F.scaled_dot_product_attention (causal): one forward and
    one backward for every batch and length, gradients as eager's."""
    gen = torch.Generator().manual_seed(12)
    batches = [(torch.randn(b, s, 16, generator=gen),) for b, s in [(2, 6), (3, 9), (4, 5)]]
    assert trains_like_eager(FusedAttention, batches) == 2  # the forward and the backward, once each


class Dropped(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        return self.drop(self.lin(x))


def test_dropout_in_training_over_varying_sizes():
    """tgraph_train, sizes dynamic, with dropout: one forward and one backward for every batch and
    length (the mask was drawn with a shape of numbers: one executable per size); a quarter of
    the values dropped, the rest scaled by 4/3, a fresh mask each run, and the gradient passing
    exactly where the mask kept."""
    torch.manual_seed(0)
    model = Dropped()
    fast = torch.compile(model, backend="tgraph_train", dynamic=True)
    gen = torch.Generator().manual_seed(13)
    before = compiles()
    for b, s in [(2, 24), (3, 40), (4, 17)]:
        x = torch.randn(b, s, 16, generator=gen)
        model.zero_grad()
        y = fast(x)
        y.sum().backward()
        kept = y != 0
        plain = model.lin(x).detach()
        assert abs(1 - float(kept.float().mean()) - 0.25) < 0.08, f"{b}x{s}"
        torch.testing.assert_close(y.detach(), torch.where(kept, plain / 0.75, torch.zeros_like(plain)),
                                   rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.lin.bias.grad, kept.float().sum((0, 1)) / 0.75, rtol=1e-5, atol=1e-5)
        assert not torch.equal(kept, fast(x) != 0)  # a fresh mask each run
    assert compiles() - before == 2  # the forward and the backward, once each


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(12, 5)

    def forward(self, x, labels):
        return nn.functional.cross_entropy(self.lin(x), labels)


def test_a_loss_by_labels_trains_at_every_batch_size():
    """tgraph_train, sizes dynamic, through cross-entropy by class labels: its backward scatters
    a number over the labels' varying size (it was spread to a shape of -1s: the backward
    failed at its first run), gradients as eager's."""
    gen = torch.Generator().manual_seed(14)
    batches = [(torch.randn(b, 12, generator=gen), torch.randint(0, 5, (b,), generator=gen)) for b in (4, 7, 3)]
    assert trains_like_eager(Classifier, batches) == 2


class GroupedQueries(nn.Module):
    """Attention with fewer key / value heads than query heads (enable_gqa)."""

    def forward(self, q, k, v):
        return nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)


@pytest.mark.parametrize("entry", ["export", "dynamo"])
def test_grouped_query_attention_at_every_length(entry):
    """The key and value heads repeated over the query heads' groups by sizes computed in the
    graph (the repeat was a broadcast to a shape of -1s)."""
    model = GroupedQueries()
    fast = through(model, entry)
    gen = torch.Generator().manual_seed(15)
    before = compiles()
    with torch.no_grad():
        for b, s in [(3, 6), (5, 9), (4, 7)]:
            q = torch.randn(b, 4, s, 8, generator=gen)
            k, v = torch.randn(b, 2, s, 8, generator=gen), torch.randn(b, 2, s, 8, generator=gen)
            torch.testing.assert_close(fast(q, k, v), model(q, k, v), rtol=1e-4, atol=1e-5, msg=f"{b}x{s}")
    assert compiles() - before == 1


class Shifted(nn.Module):
    """A language model's loss: each position predicts the next label (GPT-2's shifted logits)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 11)

    def forward(self, x, labels):
        logits = self.lin(x)
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 11), labels[:, 1:].reshape(-1))


def test_a_shifted_loss_trains_at_every_length():
    """tgraph_train, sizes dynamic: the backward gets the length s as a size while its tensors are
    s - 1 long (fed to tgraph as a byte vector's length), and writes the shifted logits' gradient
    back at a bound computed from it (slice_scatter); it compiled per size before. Gradients as
    eager's."""
    gen = torch.Generator().manual_seed(16)
    batches = [(torch.randn(b, s, 8, generator=gen), torch.randint(0, 11, (b, s), generator=gen))
               for b, s in [(3, 7), (2, 12), (4, 9)]]
    assert trains_like_eager(Shifted, batches) == 2


class Convs(nn.Module):
    """Convolutions whose input gradients the backward needs: padded, strided (the last input
    rows no window reaches), dilated, grouped."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.c = nn.Conv2d(4, 4, 1, stride=2)
        self.d = nn.Conv2d(4, 2, 3, padding=2, dilation=2, groups=2)

    def forward(self, x):
        return self.d(torch.relu(self.c(torch.relu(self.b(torch.relu(self.a(x)))))))


def test_convolution_training_over_varying_sizes_is_one_executable():
    """A convolution's input gradient where the input's sizes vary: a transposed convolution cut
    and padded by sizes computed in the graph (conv2d_data_grad takes the sizes as numbers; given
    -1s the backward failed at its first run, "shape [-1,-1,-1,4] is not static"). One forward and
    one backward for every batch and image size, gradients as eager's."""
    gen = torch.Generator().manual_seed(17)
    batches = [(torch.randn(b, 3, h, w, generator=gen),) for b, h, w in [(2, 16, 20), (3, 13, 8), (4, 9, 18)]]
    assert trains_like_eager(Convs, batches) == 2
