"""tgraph.torch.compile's disk cache (issue 22): a model seen before starts without torch.export.

An entry is the compiled executable (Executable.save, a checksummed .tgx holding the graph and
its weights) and how its outputs map back to torch (JSON), under a key that hashes what the
export would depend on: tgraph's and torch's versions; every submodule's class, its source,
its training flag and its plain attributes (sizes, flags, a Hugging Face config's repr); every
parameter and buffer's name, shape, dtype and bytes; the input signature; device, precision and
whether sizes are dynamic. Changed weights or code give another key, so a stale entry is never
used. Weights in CPU memory are hashed by SHA-1 (BERT-base's 440 MB: 0.27 s); weights on a GPU
are reduced there first, by a fixed random linear hash of each 8 KiB block (mod 2^64, 1/8192 of
the bytes come back), so they are not copied to the host (0.42 s for BERT-base on the H200).
The entry is written after the first call, by a thread of its own (Executable.save releases
the GIL): the caller has its result without waiting for the file (0.9 s for BERT-base f16).

Where: $TGRAPH_CACHE_DIR/torch (default ~/.cache/tgraph/torch); TGRAPH_NO_COMPILE_CACHE=1
turns it off; TGRAPH_COMPILE_CACHE_MB bounds it (default 4096: the least recently used
entries go first). Two processes may write one entry at once: each writes its own temporary
files and renames them into place, the JSON last, so a reader sees a whole entry or none; an
entry that does not load (truncated, another tgraph) is dropped and rebuilt.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import pathlib
import threading

import torch

import tgraph as tg

_PLAIN = (bool, int, float, str, type(None))


def directory() -> pathlib.Path | None:
    if os.environ.get("TGRAPH_NO_COMPILE_CACHE", "0") not in ("", "0"):
        return None
    base = os.environ.get("TGRAPH_CACHE_DIR")
    return (pathlib.Path(base) if base else pathlib.Path.home() / ".cache" / "tgraph") / "torch"


def _plain(v) -> bool:
    return isinstance(v, _PLAIN) or (isinstance(v, (tuple, list)) and all(isinstance(x, _PLAIN) for x in v))


def key(module: torch.nn.Module, signatures: list, options) -> list | None:
    """The entries' names, one per signature (the module's weights hashed once for all), or
    None where the module cannot be hashed (a tensor subclass, say)."""
    try:
        module_hash = _module_hash(module)
        return [_named(module_hash, s, options) for s in signatures]
    except Exception:  # noqa: BLE001  (no cache rather than no model)
        return None


def _named(module_hash: bytes, signature, options) -> str:
    h = hashlib.sha1(f"tgraph {tg.__version__} torch {torch.__version__} {options!r} {signature!r}".encode())
    h.update(module_hash)
    return h.hexdigest()


def _source_of(cls, files: dict) -> bytes:
    """The bytes of the file defining cls (any edit there changes the key: reading whole files
    cost a tenth of what inspect.getsource's parsing of each class did), or its qualified name."""
    try:
        path = inspect.getsourcefile(cls)
    except (OSError, TypeError):
        path = None
    if not path:
        return cls.__qualname__.encode()
    if path not in files:
        try:
            with open(path, "rb") as f:
                files[path] = f.read()
        except OSError:
            files[path] = b""
    return path.encode() + files[path]


_ROW = 1024  # int64 words per hashed block of a GPU tensor
_MULTIPLIERS: dict = {}


def _multipliers(device) -> torch.Tensor:
    """Fixed odd 64-bit multipliers, one per word of a block: the same in every process."""
    m = _MULTIPLIERS.get(device)
    if m is None:
        g = torch.Generator().manual_seed(0x7467726170680001)
        m = (torch.randint(-2 ** 62, 2 ** 62, (_ROW,), generator=g, dtype=torch.int64) * 2 + 1).to(device)
        _MULTIPLIERS[device] = m
    return m


def _device_rows(t: torch.Tensor) -> torch.Tensor:
    """A GPU tensor's bytes reduced on the GPU: per block of _ROW int64 words, the sum of word x
    multiplier (wrapping mod 2^64, so the order of the sum cannot change it). Two different
    blocks agree with probability about 2^-63 over the multipliers' choice; the key names an
    entry and defends against no one, as SHA-1 here does."""
    b = t.detach().contiguous().view(-1).view(torch.uint8)
    pad = (-b.numel()) % (8 * _ROW)
    if pad:
        b = torch.cat([b, b.new_zeros(pad)])
    return (b.view(torch.int64).view(-1, _ROW) * _multipliers(t.device)).sum(dim=1)


def _module_hash(module: torch.nn.Module) -> bytes:
    """The module's classes' sources, attributes and weights, hashed. SHA-1 for speed
    (hardware-accelerated: 0.27 s for BERT-base's 440 MB of weights, blake2b 0.47 s); the key
    names an entry, it defends against no one."""
    h = hashlib.sha1()
    sources, files = set(), {}
    for name, m in module.named_modules():
        cls = type(m)
        if cls not in sources:
            sources.add(cls)
            h.update(cls.__qualname__.encode())
            h.update(_source_of(cls, files))
        attrs = sorted((k, repr(v)) for k, v in vars(m).items() if not k.startswith("_") and _plain(v))
        h.update(f"{name}:{cls.__module__}.{cls.__qualname__}:{m.training}:{attrs}".encode())
        config = getattr(m, "config", None)
        if config is not None and not isinstance(config, torch.nn.Module):
            h.update(repr(config).encode())
    on_device = []
    for name, t in module.state_dict().items():
        t = t.detach()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}:{t.device.type}".encode())
        if t.device.type == "cuda" and t.numel():
            on_device.append(_device_rows(t))
        else:
            h.update(memoryview(t.contiguous().view(-1).view(torch.uint8).cpu().numpy()))
    if on_device:  # one copy back for all of them
        h.update(memoryview(torch.cat(on_device).cpu().numpy()))
    return h.digest()


_PENDING: list = []  # threads writing entries (store_later)
_PENDING_LOCK = threading.Lock()


def wait() -> None:
    """Returns once every entry this process began writing is written."""
    with _PENDING_LOCK:
        threads = list(_PENDING)
    for t in threads:
        t.join()
    with _PENDING_LOCK:
        _PENDING[:] = [t for t in _PENDING if t.is_alive()]


def store_later(k: str, exe: tg.Executable, meta: dict) -> None:
    """store() on a thread of its own (not a daemon: the interpreter waits for it at exit)."""
    d = directory()
    if d is None:
        return
    t = threading.Thread(target=store, args=(k, exe, meta, d), name="tgraph-cache-store")
    with _PENDING_LOCK:
        _PENDING.append(t)
    t.start()


def load(k: str):
    """(executable, metadata) of entry k, or None."""
    wait()  # an entry this process is writing is found whole
    d = directory()
    if d is None:
        return None
    meta_path, exe_path = d / f"{k}.json", d / f"{k}.tgx"
    try:
        meta = json.loads(meta_path.read_text())
        exe = tg.Executable.load(str(exe_path))
    except FileNotFoundError:
        return None
    except (tg.Error, ValueError, OSError):  # truncated, corrupt or another version's: rebuilt
        for p in (meta_path, exe_path):
            p.unlink(missing_ok=True)
        return None
    for p in (meta_path, exe_path):  # recently used
        try:
            os.utime(p)
        except OSError:
            pass
    return exe, meta


def store(k: str, exe: tg.Executable, meta: dict, d: pathlib.Path | None = None) -> None:
    d = d or directory()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = f".{os.getpid()}.{id(exe)}.tmp"
        exe.save(str(d / f"{k}.tgx{tmp}"))
        os.replace(d / f"{k}.tgx{tmp}", d / f"{k}.tgx")
        (d / f"{k}.json{tmp}").write_text(json.dumps(meta))
        os.replace(d / f"{k}.json{tmp}", d / f"{k}.json")
        _bound(d)
    except (OSError, tg.Error, TypeError, ValueError):
        pass  # a cache that cannot be written is no cache, not an error


def _bound(d: pathlib.Path) -> None:
    limit = int(os.environ.get("TGRAPH_COMPILE_CACHE_MB", "4096")) << 20
    entries = []
    for meta in d.glob("*.json"):
        exe = meta.with_suffix(".tgx")
        try:
            size = meta.stat().st_size + (exe.stat().st_size if exe.exists() else 0)
            entries.append((meta.stat().st_mtime, size, meta, exe))
        except OSError:
            continue
    total = sum(e[1] for e in entries)
    for _, size, meta, exe in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        meta.unlink(missing_ok=True)
        exe.unlink(missing_ok=True)
        total -= size
