"""The native CPU attention kernel (own_engine/csrc/paged_attention.c): equal to an fp64 reference
over block sizes, GQA ratios, head dims and query lengths; its build cache; and the fallback to the
PyTorch path when no compiler works."""

from __future__ import annotations

import os
import stat
import time

import pytest
import torch

from own_engine import cpu_kernels
from own_engine.attention import build_metadata, paged_attention, write_kv
from own_engine.config import ConfigError
from own_engine.model_runner import select_attention

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def kernel():
    fn, why = cpu_kernels.native_attention()
    if fn is None:  # the machines this runs on have gcc; a missing one is a defect of the setup
        pytest.fail(f"native kernel unusable here: {why}")
    return fn


def _case(seed, H, nkv, D, bs, q_lens, ctx_lens):
    g = torch.Generator().manual_seed(seed)
    nb = [-(-c // bs) for c in ctx_lens]
    perm = torch.randperm(sum(nb) + 3, generator=g).tolist()  # scattered, non-contiguous blocks
    tables, at = [], 0
    for n in nb:
        tables.append(perm[at:at + n])
        at += n
    T = sum(q_lens)
    q, k, v = (torch.randn(T, n, D, generator=g) for n in (H, nkv, nkv))
    kc, vc = (torch.randn(len(perm), bs, nkv, D, generator=g) for _ in range(2))
    return q, k, v, kc, vc, tables


def _assert_kernel_matches_torch(kernel, seed, H, nkv, D, bs, q_lens, ctx_lens):
    """The native attention on a random case equals the PyTorch path (fp32, 1e-5)."""
    q, k, v, kc, vc, tables = _case(seed, H, nkv, D, bs, q_lens, ctx_lens)
    meta = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, CPU, torch_decode=False)
    write_kv(k, v, kc, vc, meta.slot_mapping)
    out = kernel(q, k, v, kc, vc, meta, D ** -0.5)
    ref = paged_attention(q, k, v, kc, vc, build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, CPU), D ** -0.5)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("H,nkv,D,bs", [(9, 3, 64, 16), (8, 8, 32, 1), (16, 2, 128, 4), (4, 1, 16, 7)])
def test_kernel_matches_fp64_reference(kernel, H, nkv, D, bs):
    # decodes at several context lengths, a 5-token verify, a prefill, a chunk with cached context
    q_lens, ctx_lens = [1, 1, 5, 1, 30, 40, 16], [1, 57, 23, 200, 30, 95, 16 + 9]
    q, k, v, kc, vc, tables = _case(0, H, nkv, D, bs, q_lens, ctx_lens)
    meta = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, CPU, torch_decode=False)
    kc_n, vc_n = kc.clone(), vc.clone()
    write_kv(k, v, kc_n, vc_n, meta.slot_mapping)
    out = kernel(q, k, v, kc_n, vc_n, meta, D ** -0.5)
    meta64 = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, CPU)
    kc64, vc64 = kc.double(), vc.double()
    write_kv(k.double(), v.double(), kc64, vc64, meta64.slot_mapping)
    assert torch.equal(kc_n.double(), kc64) and torch.equal(vc_n.double(), vc64)
    ref = paged_attention(q.double(), k.double(), v.double(), kc64, vc64, meta64, D ** -0.5)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    # the decode group (q_len <= 16 with cached context) went through the kernel, row by row: not the
    # first sequence (no context) nor the 30/40-token prefills; the 16-token chunk at 9 cached tokens did
    assert meta.dec_rows.tolist() == [1, 2, 3, 4, 5, 6, 7] + list(range(78, 94))
    assert meta.dec_lens.tolist() == [57, 19, 20, 21, 22, 23, 200] + list(range(10, 26))
    assert meta.dec_max_len == 200


@pytest.mark.parametrize("H,nkv,bs", [(9, 3, 16), (8, 8, 1), (8, 1, 7), (6, 2, 32), (4, 2, 5)])
def test_native_prefill_attention_matches_fp64_reference(kernel, H, nkv, bs, monkeypatch):
    """Prefill chunks at head_dim 64 go to the native flash kernel (SDPA is not called): chunks with
    and without cached context, lengths around its 6-row and 16-key tiles, next to decodes."""
    D = 64
    q_lens, ctx_lens = [1, 17, 97, 6, 1, 23, 300], [1, 17, 97 + 40, 6, 60, 23 + 16, 300]
    q, k, v, kc, vc, tables = _case(2, H, nkv, D, bs, q_lens, ctx_lens)
    meta = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, CPU, torch_decode=False)
    write_kv(k, v, kc, vc, meta.slot_mapping)
    assert len(meta.prefills) == 6
    monkeypatch.setattr(cpu_kernels, "prefill_attention", lambda *a: pytest.fail("SDPA used for a D=64 prefill"))
    out = kernel(q, k, v, kc, vc, meta, 0.125)
    meta64 = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, CPU)
    ref = paged_attention(q.double(), k.double(), v.double(), kc.double(), vc.double(), meta64, 0.125)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)


def test_prefill_of_other_head_sizes_and_without_the_kernel_takes_sdpa(kernel, monkeypatch):
    H, nkv, bs = 4, 2, 4
    calls = []
    real = cpu_kernels.prefill_attention
    monkeypatch.setattr(cpu_kernels, "prefill_attention", lambda *a: (calls.append(1), real(*a))[1])
    for D, native in ((32, True), (64, False)):
        monkeypatch.setattr(kernel, "native_prefill", native)
        _assert_kernel_matches_torch(kernel, 3, H, nkv, D, bs, [20, 1], [20, 9])
    assert len(calls) == 2


def test_kernel_reads_q_through_strides(kernel):
    """q and k arrive as views of one fused projection (non-contiguous): strides are honoured."""
    H, nkv, D, bs = 6, 2, 32, 4
    q_lens, ctx_lens = [1, 3], [10, 12]
    _, _, _, kc, vc, tables = _case(1, H, nkv, D, bs, q_lens, ctx_lens)
    fused = torch.randn(4, H + 2 * nkv, D)
    q, k, v = fused[:, :H], fused[:, H:H + nkv], fused[:, H + nkv:]
    meta = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, CPU, torch_decode=False)
    write_kv(k, v, kc, vc, meta.slot_mapping)
    out = kernel(q, k, v, kc, vc, meta, 0.3)
    ref = paged_attention(q.contiguous(), k.contiguous(), v.contiguous(), kc, vc,
                          build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, CPU), 0.3)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def _fake_cc(tmp_path, body: str) -> str:
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\n" + body + "\n")
    cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    return str(cc)


def test_build_is_cached_and_keyed(tmp_path, monkeypatch):
    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(tmp_path / "k"))
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    fn, why = cpu_kernels.native_attention()
    assert why is None and fn is not None
    built = list((tmp_path / "k").glob("paged_attention-*.so"))
    assert len(built) == 1 and not list((tmp_path / "k").glob("*.so.tmp*"))
    inode = built[0].stat().st_ino
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    assert cpu_kernels.native_attention()[1] is None
    assert built[0].stat().st_ino == inode  # reused, not rebuilt (a build replaces the file: a new inode)


def test_unwritable_kernel_cache_builds_in_the_temp_fallback(tmp_path, monkeypatch, caplog):
    """A kernel cache that cannot be created (here: under a regular file; a read-only home in
    practice) still gives the native path, built in the per-user temp directory, with a warning."""
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(tmp_path / "file" / "k"))
    monkeypatch.setattr(cpu_kernels, "_fallback_kernel_dir", lambda: tmp_path / "fallback")
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    with caplog.at_level("WARNING", logger="own_engine"):
        fn, why = cpu_kernels.native_attention()
    assert why is None and fn is not None
    assert len(list((tmp_path / "fallback").glob("paged_attention-*.so"))) == 1
    assert f"kernel cache {tmp_path / 'file' / 'k'} is not writable" in caplog.text


def test_world_writable_fallback_dir_is_refused(tmp_path, monkeypatch):
    """The temp fallback is shared ground: a directory others can write to is not trusted."""
    (tmp_path / "file").write_text("not a directory")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(tmp_path / "file" / "k"))
    monkeypatch.setattr(cpu_kernels, "_fallback_kernel_dir", lambda: shared)
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    fn, why = cpu_kernels.native_attention()
    assert fn is None and f"refusing the kernel directory {shared}" in why and "\n" not in why
    assert not list(shared.iterdir())


@pytest.mark.parametrize("bad", ["garbage", "foreign library"])
def test_unusable_cached_library_is_rebuilt(tmp_path, monkeypatch, bad):
    """A truncated file or another library under the cache key (an older build, a hash clash) is
    replaced by a fresh build instead of failing the engine start."""
    import shutil
    import subprocess

    k = tmp_path / "k"
    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(k))
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    assert cpu_kernels.native_attention()[1] is None
    (good,) = k.glob("paged_attention-*.so")
    # a directory this process never loaded from (dlopen reuses a path it has already loaded)
    built = tmp_path / "k2" / good.name
    built.parent.mkdir()
    if bad == "garbage":
        built.write_bytes(b"garbage")
    else:
        src = tmp_path / "other.c"
        src.write_text("int unrelated(void) { return 1; }\n")
        cc = shutil.which("gcc") or shutil.which("cc")
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(built), str(src)], check=True)
    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(built.parent))
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    fn, why = cpu_kernels.native_attention()
    assert why is None and fn is not None and built.stat().st_size == good.stat().st_size


def test_stale_temp_files_of_a_killed_build_are_removed(tmp_path, monkeypatch):
    k = tmp_path / "k"
    k.mkdir()
    stale, fresh = k / "tmpdead.so", k / "tmpbusy.so"
    stale.write_bytes(b"half a library")
    fresh.write_bytes(b"another build in progress")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(k))
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    assert cpu_kernels.native_attention()[1] is None
    assert not stale.exists() and fresh.exists()  # a recent one may belong to a concurrent build


def test_builds_unused_for_a_month_are_pruned_and_a_reused_build_is_kept(tmp_path, monkeypatch):
    k = tmp_path / "k"
    k.mkdir()
    month = cpu_kernels.UNUSED_BUILD_DAYS * 86400
    old, recent, other = k / "paged_attention-0000000000000000.so", k / "paged_attention-1111111111111111.so", k / "notes.so"
    for f in (old, recent, other):
        f.write_bytes(b"an older build")
        os.utime(f, (time.time() - month - 60,) * 2)
    os.utime(recent, (time.time() - month + 3600,) * 2)
    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(k))
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    assert cpu_kernels.native_attention()[1] is None
    assert not old.exists() and recent.exists() and other.exists()  # only our own builds, only unused ones
    (current,) = set(k.glob("paged_attention-*.so")) - {recent}
    os.utime(current, (time.time() - month - 60,) * 2)
    inode = current.stat().st_ino
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    assert cpu_kernels.native_attention()[1] is None
    assert current.stat().st_ino == inode and time.time() - current.stat().st_mtime < 600  # reused, mtime refreshed


def test_without_a_working_compiler_auto_falls_back_and_native_refuses(tmp_path, monkeypatch):
    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(tmp_path / "empty"))
    cc = _fake_cc(tmp_path, 'case "$1" in --version) echo "fakecc 1.0";; '
                                                '*) echo "error: unsupported flag -march=native" >&2; exit 1;; esac')
    monkeypatch.setenv("CC", cc)
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    fn, why = cpu_kernels.native_attention()
    assert fn is None
    assert why == (f"the native CPU kernels are unusable: {cc} failed to build paged_attention.c: "
                   f"error: unsupported flag -march=native (kernel cache {tmp_path / 'empty'}; "
                   "OWN_ENGINE_KERNEL_DIR moves it, CC picks the compiler)")
    attn, name, note = select_attention(CPU, "auto")
    assert attn is paged_attention and name == "torch" and note == why
    with pytest.raises(ConfigError) as exc:
        select_attention(CPU, "native")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("attention_backend='native': the native CPU kernels")
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        select_attention(CPU, "triton")


def test_cc_is_a_command_line(tmp_path, monkeypatch):
    """CC="ccache gcc" (a launcher and its compiler, as make reads CC) builds through the launcher."""
    import shutil

    log = tmp_path / "launcher.log"
    launcher = _fake_cc(tmp_path, f'echo "$@" >> {log}; exec "$@"')
    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", f"{launcher} {shutil.which('gcc')}")
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    fn, why = cpu_kernels.native_attention()
    assert why is None and fn is not None
    calls = log.read_text().splitlines()
    assert calls[0].endswith("gcc --version") and any(" -march=native " in c for c in calls[1:])
    assert len(list((tmp_path / "cache").glob("paged_attention-*.so"))) == 1


def test_cc_flags_are_part_of_the_cache_key_and_a_bad_cc_is_one_line(tmp_path, monkeypatch):
    """CC="gcc -O1" must not reuse (or leave behind for) plain gcc's build; an unparseable CC falls back."""
    import shutil

    monkeypatch.setenv("OWN_ENGINE_KERNEL_DIR", str(tmp_path / "k"))
    gcc = shutil.which("gcc")
    for cc in (gcc, f"{gcc} -O1"):
        monkeypatch.setenv("CC", cc)
        monkeypatch.setattr(cpu_kernels, "_STATE", {})
        assert cpu_kernels.native_attention()[1] is None
    assert len(list((tmp_path / "k").glob("paged_attention-*.so"))) == 2
    monkeypatch.setenv("CC", "gcc '")
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    fn, why = cpu_kernels.native_attention()
    assert fn is None and why.startswith("CC=\"gcc '\" is not a command line (No closing quotation)")
    attn, name, note = select_attention(CPU, "auto")
    assert name == "torch" and note == why


def test_loading_the_kernels_keeps_denormals_in_the_process(tmp_path):
    """Linked with -ffast-math, gcc < 13 adds crtfastmath.o, whose constructor sets flush-to-zero for
    the whole process (PyTorch included); the library is linked without it."""
    import subprocess
    import sys

    code = ("import torch; from own_engine import cpu_kernels as c; x = torch.tensor([1e-39]); "
            "before = (x * 1).item(); fn, why = c.native_attention(); assert why is None, why; "
            "print(before, (x * 1).item())")
    env = dict(os.environ, OWN_ENGINE_KERNEL_DIR=str(tmp_path / "k"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = map(float, out.stdout.split())
    assert before == after > 0


def test_no_compiler_on_path(tmp_path, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    assert cpu_kernels.native_attention() == (None, "no C compiler (gcc/cc) on PATH for the native CPU kernels (CC=... names one)")
    assert os.environ["PATH"] == str(tmp_path)


def test_torch_backend_is_always_the_pytorch_path():
    assert select_attention(CPU, "torch") == (paged_attention, "torch", None)


def test_layer_ops_match_their_pytorch_definitions(kernel):
    errs = cpu_kernels.layer_ops_errors(kernel.layer_ops)
    assert set(errs) == {"rope", "kv_write", "add_rms_norm", "silu_mul"}
    assert errs["kv_write"] == 0.0  # a copy
    assert all(e < 2e-6 for e in errs.values()), errs


@pytest.mark.parametrize("scale", [1.0, 30.0, 300.0])
def test_silu_mul_is_finite_and_right_at_large_activations(kernel, scale):
    """Gates far below -88 made exp(-g) overflow (NaN under -ffast-math) before; 16-lane and tail paths."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(4)
    inter = 16 * 6 + 5  # the vector loop and the scalar tail
    gu = torch.randn(9, 2 * inter, generator=g) * scale
    act = torch.empty(9, inter)
    kernel.layer_ops.silu_mul(gu, act)
    ref = F.silu(gu[:, :inter].double()) * gu[:, inter:].double()
    assert bool(torch.isfinite(act).all())
    torch.testing.assert_close(act.double(), ref, rtol=1e-5, atol=1e-30 + 1e-6 * scale)


def test_model_uses_the_fused_layer_path_only_with_the_native_kernel(kernel):
    from own_engine.model import LlamaModel
    from own_engine.random_model import RandomLlamaSpec, write_random_llama

    import tempfile
    from pathlib import Path

    from own_engine.config import ModelConfig

    with tempfile.TemporaryDirectory() as d:
        folder = write_random_llama(Path(d), RandomLlamaSpec())
        cfg = ModelConfig.from_dir(folder)
        native = LlamaModel.from_dir(folder, cfg, 64, CPU, kernel)
        plain = LlamaModel.from_dir(folder, cfg, 64, CPU, paged_attention)
    assert native.layer_ops is kernel.layer_ops and plain.layer_ops is None
    assert native.truncated(1).layer_ops is kernel.layer_ops
    # one prefill + one decode through both paths: same hidden states
    bs, H, nkv, D = 4, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    shape = (8, bs, nkv, D)
    outs = []
    for model in (native, plain):
        caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(model.num_layers)]
        ids = torch.tensor([5, 17, 3, 44, 9, 2], dtype=torch.int64)
        m1 = build_metadata([6], [6], [[0, 1]], bs, H, nkv, CPU, torch_decode=model is plain)
        h1 = model.forward(ids, m1.positions, m1, caches)
        m2 = build_metadata([1], [7], [[0, 1]], bs, H, nkv, CPU, torch_decode=model is plain)
        h2 = model.forward(torch.tensor([8]), m2.positions, m2, caches)
        outs.append((h1, h2))
    torch.testing.assert_close(outs[0][0], outs[1][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs[0][1], outs[1][1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("M", [1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 40, 130])
def test_panel_linear_matches_f_linear(kernel, M):
    """Every row-block remainder (1..8 rows after the 8-row blocks), N that is not a multiple of the
    48-column panel (13: one partial panel; 100: two full and one of 4 columns) and the model's
    shapes (K = 576 and 1536), against F.linear; the packed layout is panels[p, k, j] = w[48 p + j, k]."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(M)
    ops = kernel.layer_ops
    for K, N in ((40, 13), (7, 100), (576, 960), (1536, 96)):
        x, w = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g)
        panels = ops.pack_panels(w)
        ref = torch.zeros(-(-N // 48) * 48, K)
        ref[:N] = w  # rows past N are zero
        assert torch.equal(panels, ref.view(-1, 48, K).transpose(1, 2))
        torch.testing.assert_close(ops.panel_linear(x, panels, N), F.linear(x, w), atol=2e-4 * K ** 0.5, rtol=1e-5)
    with pytest.raises(ValueError, match="panel_linear needs x"):
        ops.panel_linear(torch.empty(0, 4), ops.pack_panels(torch.empty(3, 4)), 3)
    with pytest.raises(ValueError, match="panel_linear needs x"):
        ops.panel_linear(torch.randn(2, 5), ops.pack_panels(torch.empty(3, 4)), 3)
    with pytest.raises(ValueError, match="contiguous float32 x"):
        ops.panel_linear(torch.randn(2, 8)[:, :4], ops.pack_panels(torch.empty(3, 4)), 3)
    with pytest.raises(ValueError, match="contiguous float32 x"):
        ops.panel_linear(torch.randn(2, 4, dtype=torch.float64), ops.pack_panels(torch.empty(3, 4)), 3)
    with pytest.raises(ValueError, match="float32 CPU weight"):
        ops.pack_panels(torch.empty(3, 4, dtype=torch.float64))


def test_panel_linear_plain_c_build_without_avx512(tmp_path):
    """The portable loop (a CPU without AVX-512) computes the same product from the same layout."""
    import ctypes
    import shutil
    import subprocess

    import torch.nn.functional as F

    from own_engine.cpu_kernels import SOURCE

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    so = tmp_path / "plain.so"
    subprocess.run([cc, "-O2", "-march=x86-64", "-shared", "-fPIC", "-o", str(so), str(SOURCE), "-lm"], check=True)
    lib = ctypes.CDLL(str(so))
    assert lib.panel_linear_vectorized() == 0
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(11, 30, generator=g), torch.randn(70, 30, generator=g)
    panels, out = torch.empty(2, 30, 48), torch.empty(11, 70)
    P, I = ctypes.c_void_p, ctypes.c_int64
    lib.pack_panels.argtypes = [P, I, I, P]
    lib.panel_linear.argtypes = [P, I, I, P, I, P]
    lib.pack_panels(w.data_ptr(), 70, 30, panels.data_ptr())
    assert lib.panel_linear(x.data_ptr(), 11, 30, panels.data_ptr(), 70, out.data_ptr()) == 0
    torch.testing.assert_close(out, F.linear(x, w), atol=1e-4, rtol=1e-5)
    assert lib.panel_linear(x.data_ptr(), 0, 30, panels.data_ptr(), 70, out.data_ptr()) == -1


def test_linear_dispatch_panels_then_onednn_then_dense(kernel):
    """With panel ops every 2-D contiguous input takes the panel kernel and no oneDNN copy is made;
    without them M > 1 takes oneDNN; "dense" takes neither; a non-contiguous input falls back."""
    from own_engine.linear import Linear

    class Spy:
        def __init__(self):
            self.calls = []

        def pack_panels(self, w):
            return kernel.layer_ops.pack_panels(w)

        def panel_linear(self, x, panels, n):
            self.calls.append(x.shape[0])
            return kernel.layer_ops.panel_linear(x, panels, n)

    spy = Spy()
    w = torch.randn(24, 32)
    lin = Linear(w, "auto", spy)
    assert lin.packed is None and lin.panels is not None
    for M in (1, 16, 17, 600):
        x = torch.randn(M, 32)
        torch.testing.assert_close(lin(x), x @ w.t(), atol=1e-4, rtol=1e-5)
    assert spy.calls == [1, 16, 17, 600]
    xt = torch.randn(32, 5).t()  # not contiguous: the dense path
    torch.testing.assert_close(lin(xt), xt @ w.t(), atol=1e-4, rtol=1e-5)
    assert spy.calls == [1, 16, 17, 600]
    one = Linear(w, "auto")
    assert one.panels is None and one.packed is not None
    dense = Linear(w, "dense", spy)
    assert dense.panels is None and dense.packed is None and dense(torch.randn(3, 32)).shape == (3, 24)
    assert spy.calls == [1, 16, 17, 600]


def test_many_query_heads_per_kv_head(kernel):
    """MQA-style geometry (20 query heads on 1 KV head) goes through the kernel too."""
    _assert_kernel_matches_torch(kernel, 2, 20, 1, 32, 4, [1, 3], [9, 14])


def _models_at_two_and_one_threads(kernel, spec, max_len: int):
    """(model loaded at 2 torch threads, the same at 1 thread, its ModelConfig) of a random Llama."""
    from own_engine.config import ModelConfig
    from own_engine.model import LlamaModel
    from own_engine.random_model import write_random_llama

    import tempfile
    from pathlib import Path

    before = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as d:
        folder = write_random_llama(Path(d), spec)
        cfg = ModelConfig.from_dir(folder)
        try:
            torch.set_num_threads(2)
            two = LlamaModel.from_dir(folder, cfg, max_len, CPU, kernel)
            torch.set_num_threads(1)
            one = LlamaModel.from_dir(folder, cfg, max_len, CPU, kernel)
        finally:
            torch.set_num_threads(before)
    return two, one, cfg


def test_panel_kernel_only_single_threaded(kernel):
    from own_engine.random_model import RandomLlamaSpec

    two, one, _ = _models_at_two_and_one_threads(kernel, RandomLlamaSpec(), 64)
    assert two.linear_kernels == "oneDNN (M > 1) + MKL (M = 1)"
    assert one.linear_kernels == "native panel GEMM"


def test_fused_decode_forward_is_bit_identical_to_the_per_op_loop(kernel, monkeypatch):
    """Decode-only steps (decodes and 3-row verify queries, scattered blocks, odd GQA geometry) run
    all layers in one native call with exactly the per-op loop's results; a step with a prefill
    chunk takes the loop; two threads (no panels) never fuse."""
    from own_engine.random_model import RandomLlamaSpec

    spec = RandomLlamaSpec(hidden_size=96, intermediate_size=100, num_layers=3, num_heads=6, num_kv_heads=2, head_dim=16)
    two, model, cfg = _models_at_two_and_one_threads(kernel, spec, 128)
    assert model.fused_decode and not two.fused_decode
    assert model.truncated(2).fused_decode
    calls = []
    real = kernel.layer_ops.decode_forward
    monkeypatch.setattr(kernel.layer_ops, "decode_forward", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    bs, H, nkv, D = 4, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    g = torch.Generator().manual_seed(3)
    tables = [[7, 2, 9, 0], [5, 11, 4], [3, 8, 1, 10]]
    ctx = [13, 6, 9]  # tokens in the cache before the step
    shape = (12, bs, nkv, D)
    base = [(torch.randn(shape, generator=g), torch.randn(shape, generator=g)) for _ in range(cfg.num_layers)]
    for q_lens in ([1, 1, 1], [1, 3, 1], [3, 3, 3]):
        ids = torch.randint(0, cfg.vocab_size, (sum(q_lens),), generator=g)
        meta = build_metadata(q_lens, [c + q for c, q in zip(ctx, q_lens)], tables, bs, H, nkv, CPU, torch_decode=False)
        outs, caches_after = [], []
        for fused in (True, False):
            model.fused_decode = fused
            caches = [(k.clone(), v.clone()) for k, v in base]
            outs.append(model.forward(ids, meta.positions, meta, caches))
            caches_after.append(caches)
        assert torch.equal(outs[0], outs[1]), q_lens
        assert all(torch.equal(a, b) for la, lb in zip(*caches_after) for a, b in zip(la, lb))
    assert len(calls) == 3
    model.fused_decode = True
    mixed = build_metadata([1, 5], [14, 5], [tables[0], tables[1]], bs, H, nkv, CPU, torch_decode=False)
    model.forward(torch.arange(6), mixed.positions, mixed, [(k.clone(), v.clone()) for k, v in base])
    assert len(calls) == 3  # the prefill chunk kept the step on the per-op loop
    with pytest.raises(ValueError, match="decode-only"):
        real(torch.zeros(3, 8, dtype=torch.int64), torch.zeros(6, cfg.hidden_size), torch.zeros(6, cfg.hidden_size),
             (cfg.hidden_size, cfg.intermediate_size, H, nkv, D), 1e-5, 1.0, model.cos, model.sin, mixed.positions,
             mixed, bs, model.norm)
