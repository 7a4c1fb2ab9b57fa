"""Concurrency stress (issue 25): threads running executables at once get the serial results;
two processes writing the same .tgx and checkpoint paths in a loop leave files that load and
equal one writer's. TGRAPH_STRESS_SECONDS sets how long each runs (default 3; `make stress`: 60)."""
import multiprocessing as mp
import os
import threading
import time

import numpy as np

import tgraph as tg

SECONDS = float(os.environ.get("TGRAPH_STRESS_SECONDS", "3"))


def _executables():
    rng = np.random.default_rng(0)
    exes, inputs = [], []
    for k in range(4):
        g = tg.Graph()
        x = g.placeholder([16, 32], tg.f32, "x")
        w = g.constant(rng.standard_normal((32, 32)).astype(np.float32))
        y = g.softmax(g.matmul(g.tanh(x * float(k + 1)), w), -1)
        s, = g.while_loop([y], lambda a: (g.reduce_max(a) > 0.05, [a]), lambda a: [a * 0.9])
        exes.append(g.compile([x], [y.sum(axis=1), s], device="cpu"))
        inputs.append(rng.standard_normal((16, 32)).astype(np.float32))
    return exes, inputs


def test_threads_running_executables_get_the_serial_results():
    exes, inputs = _executables()
    want = [e.run([a]) for e, a in zip(exes, inputs)]
    errors, runs = [], [0] * 8
    stop = time.monotonic() + SECONDS

    def worker(t):
        k = t % 4
        try:
            while time.monotonic() < stop:
                got = exes[k].run([inputs[k]])
                for gv, wv in zip(got, want[k]):
                    np.testing.assert_array_equal(gv, wv)
                runs[t] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert min(runs) > 0
    print(f"\nstress: {sum(runs)} runs by 8 threads on 4 executables in {SECONDS:g} s, all equal to the serial results")


def _writer(value, tgx, ckpt, seconds):
    g = tg.Graph()
    w = g.variable(np.full(50000, value, np.float32), "w")
    exe = g.compile([], [w * 1.0], device="cpu")
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        exe.save(tgx)
        exe.save_checkpoint(ckpt)


def test_two_processes_writing_one_path_leave_whole_files(tmp_path):
    tgx, ckpt = str(tmp_path / "m.tgx"), str(tmp_path / "m.ckpt")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(float(v), tgx, ckpt, SECONDS)) for v in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    loaded = tg.Executable.load(tgx)
    w = loaded.variable("w")
    assert w[0] in (1.0, 2.0) and np.all(w == w[0])
    assert loaded.load_checkpoint(ckpt) == ["w"]
    w = loaded.variable("w")
    assert w[0] in (1.0, 2.0) and np.all(w == w[0])
    assert sorted(os.listdir(tmp_path)) == ["m.ckpt", "m.tgx"]  # no temp file left behind
