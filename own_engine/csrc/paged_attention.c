/* Paged attention for short queries (decodes, speculative verification) straight from the block-table
 * KV cache, the decoder layer's fused elementwise ops, and the panel GEMM. CPU, one thread, fp32. Compiled on first use by own_engine/cpu_kernels.py
 * (gcc -O3 -march=native -ffast-math -fopenmp-simd); called through ctypes with raw pointers.
 *
 * Layout (vLLM's): k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim] contiguous, so a
 * cache slot s = block * block_size + offset holds num_kv_heads rows of head_dim floats.
 *
 * For each query token i the keys are positions 0 .. lens[i]-1 of its sequence, found through
 * block_tables[seq[i]] (causal by construction: lens[i] = its position + 1). GQA: the G = H / nkv query
 * heads sharing a KV head are scored together, so every K and V row is read once per token, and all
 * KV heads of a slot are read together (one contiguous run per slot).
 * Softmax is two-pass (max, then exp-sum), as in the reference definition softmax(q k^T * scale) v
 * (Vaswani et al. 2017, eq. 1). The gathered copy of the context that a PyTorch SDPA call needs is
 * never made.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Prefetch the `bytes` bytes at p into L1 (one hint per 64-byte line; a no-op where unsupported). */
static inline void prefetch_slot(const float *p, int64_t bytes) {
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch((const char *)p + off, 0, 3);
}

/* One query token: its H = nkv * G query heads attend to keys 0 .. L-1 of the block table bt. A slot
 * (all nkv heads of one position, `row` floats) is consumed whole, in address order, and the same slot
 * of the next block is prefetched meanwhile: the cache is read as a sequence of contiguous runs instead
 * of nkv strided passes (a decode batch's KV is far larger than the caches, so the latency of each
 * miss, not the FLOPs, sets the time). Inlined with G and D compile-time constants so the dot
 * products unroll. sc: [H, L] scores then probabilities; acc: [H, D]; mx, sum: [H]. */
static inline __attribute__((always_inline)) void attend_token(
        const float *restrict qt, int64_t q_st_h, const float *restrict k_cache,
        const float *restrict v_cache, const int64_t *restrict bt, int64_t L, int64_t G, int64_t nkv,
        const int64_t D, int64_t block_size, float scale, float *restrict ot, int64_t o_st_h,
        float *restrict sc, float *restrict acc, float *restrict mx, float *restrict sum) {
    const int64_t H = nkv * G, row = nkv * D, slot_bytes = row * (int64_t)sizeof(float);
    const int64_t nblk = (L + block_size - 1) / block_size;
    for (int64_t h = 0; h < H; h++) mx[h] = -INFINITY;
    /* pass 1: sc[h * L + j] = scale * q_h . k_j */
    for (int64_t b = 0; b < nblk; b++) {
        const float *restrict kb = k_cache + bt[b] * block_size * row;
        const float *nb = b + 1 < nblk ? k_cache + bt[b + 1] * block_size * row : v_cache + bt[0] * block_size * row;
        const int64_t j0 = b * block_size;
        const int64_t m = (L - j0 < block_size) ? L - j0 : block_size;
        for (int64_t o = 0; o < m; o++) {
            prefetch_slot(nb + o * row, slot_bytes);
            for (int64_t kh = 0; kh < nkv; kh++) {
                const float *restrict kr = kb + o * row + kh * D;
                for (int64_t g = 0; g < G; g++) {
                    const int64_t h = kh * G + g;
                    const float *restrict qh = qt + h * q_st_h;
                    float a = 0.0f;
#pragma omp simd reduction(+ : a)
                    for (int64_t d = 0; d < D; d++) a += qh[d] * kr[d];
                    a *= scale;
                    sc[h * L + j0 + o] = a;
                    mx[h] = a > mx[h] ? a : mx[h];
                }
            }
        }
    }
    /* pass 2: p = exp(s - max) and its sum */
    for (int64_t h = 0; h < H; h++) {
        float *restrict sh = sc + h * L;
        const float mh = mx[h];
        float total = 0.0f;
#pragma omp simd reduction(+ : total)
        for (int64_t j = 0; j < L; j++) {
            const float e = expf(sh[j] - mh);
            sh[j] = e;
            total += e;
        }
        sum[h] = total;
    }
    /* pass 3: acc_h = sum_j p_j v_j, then out_h = acc_h / sum */
    for (int64_t x = 0; x < H * D; x++) acc[x] = 0.0f;
    for (int64_t b = 0; b < nblk; b++) {
        const float *restrict vb = v_cache + bt[b] * block_size * row;
        const float *nb = b + 1 < nblk ? v_cache + bt[b + 1] * block_size * row : vb;
        const int64_t j0 = b * block_size;
        const int64_t m = (L - j0 < block_size) ? L - j0 : block_size;
        for (int64_t o = 0; o < m; o++) {
            if (b + 1 < nblk) prefetch_slot(nb + o * row, slot_bytes);
            for (int64_t kh = 0; kh < nkv; kh++) {
                const float *restrict vr = vb + o * row + kh * D;
                for (int64_t g = 0; g < G; g++) {
                    const int64_t h = kh * G + g;
                    const float p = sc[h * L + j0 + o];
                    float *restrict ah = acc + h * D;
#pragma omp simd
                    for (int64_t d = 0; d < D; d++) ah[d] += p * vr[d];
                }
            }
        }
    }
    for (int64_t h = 0; h < H; h++) {
        float *restrict oh = ot + h * o_st_h;
        const float *restrict ah = acc + h * D;
        const float inv = 1.0f / sum[h];
#pragma omp simd
        for (int64_t d = 0; d < D; d++) oh[d] = ah[d] * inv;
    }
}

/* q: [T, H, D] with strides (q_st_t, q_st_h); out: [T, H, D] with strides (o_st_t, o_st_h).
 * rows[i], seq[i], lens[i] for i < n: flat token index, block-table row, number of keys.
 * scratch: at least H * (max(lens) + D + 2) floats. Returns 0, or -1 when H is not a multiple of nkv.
 * Keys are walked block by block (no division per key). */
int paged_decode_attention(const float *restrict q, int64_t q_st_t, int64_t q_st_h,
                           const float *restrict k_cache, const float *restrict v_cache,
                           const int64_t *restrict block_tables, int64_t bt_stride,
                           const int64_t *restrict rows, const int64_t *restrict seq,
                           const int64_t *restrict lens, int64_t n,
                           int64_t H, int64_t nkv, int64_t D, int64_t block_size, float scale,
                           float *restrict out, int64_t o_st_t, int64_t o_st_h, float *restrict scratch) {
    if (nkv < 1 || H % nkv != 0) return -1;
    const int64_t G = H / nkv;
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = rows[i], L = lens[i];
        const int64_t *restrict bt = block_tables + seq[i] * bt_stride;
        float *restrict sc = scratch, *restrict acc = scratch + H * L;
        float *restrict mx = acc + H * D, *restrict sum = mx + H;
        const float *restrict qt = q + t * q_st_t;
        float *restrict ot = out + t * o_st_t;
#define ATTEND(GG, DD) attend_token(qt, q_st_h, k_cache, v_cache, bt, L, GG, nkv, DD, block_size, scale, ot, o_st_h, sc, acc, mx, sum)
        /* constant (G, D) for the common geometries: the G dot products interleave */
        if (D == 64 && G == 3) ATTEND(3, 64);
        else if (D == 64 && G == 4) ATTEND(4, 64);
        else if (D == 64 && G == 8) ATTEND(8, 64);
        else if (D == 128 && G == 4) ATTEND(4, 128);
        else if (D == 128 && G == 8) ATTEND(8, 128);
        else if (D == 64) ATTEND(G, 64);
        else if (D == 128) ATTEND(G, 128);
        else ATTEND(G, D);
#undef ATTEND
    }
    return 0;
}

/* ---- fused elementwise ops of a decoder layer (fp32, contiguous rows) ---- */

/* Rotary embedding in place on the q and k heads of the fused projection output, then the KV write.
 * qkv: [T, (H + 2 nkv) D] rows of stride qkv_st (floats); heads 0..H+nkv-1 are rotated pairwise,
 * pair i of a head = (x[2i], x[2i+1]) (the interleaved layout own_engine/model.py loads),
 * by cos/sin [max_len, D/2] at positions[t]: (x0 c - x1 s, x0 s + x1 c). Then the k heads and the
 * v heads of token t are copied to slot slot_mapping[t] of k_cache / v_cache. */
void rope_kv_write(float *restrict qkv, int64_t qkv_st, int64_t T, int64_t H, int64_t nkv, int64_t D,
                   const float *restrict cos_t, const float *restrict sin_t, const int64_t *restrict positions,
                   float *restrict k_cache, float *restrict v_cache, const int64_t *restrict slot_mapping) {
    const int64_t half = D / 2;
    for (int64_t t = 0; t < T; t++) {
        float *restrict row = qkv + t * qkv_st;
        const float *restrict c = cos_t + positions[t] * half;
        const float *restrict s = sin_t + positions[t] * half;
        for (int64_t h = 0; h < H + nkv; h++) {
            float *restrict x = row + h * D;
#pragma omp simd
            for (int64_t i = 0; i < half; i++) {
                const float x0 = x[2 * i], x1 = x[2 * i + 1];
                x[2 * i] = x0 * c[i] - x1 * s[i];
                x[2 * i + 1] = x0 * s[i] + x1 * c[i];
            }
        }
        const int64_t slot = slot_mapping[t];
        memcpy(k_cache + slot * nkv * D, row + H * D, (size_t)(nkv * D) * sizeof(float));
        memcpy(v_cache + slot * nkv * D, row + (H + nkv) * D, (size_t)(nkv * D) * sizeof(float));
    }
}

/* h += delta (when delta is not NULL), then out = w * h * 1/sqrt(mean(h^2) + eps) per row
 * (RMSNorm, Zhang & Sennrich 2019). h, delta, out: [T, n] contiguous; w: [n]. */
void add_rms_norm(float *restrict h, const float *restrict delta, const float *restrict w, float eps,
                  int64_t T, int64_t n, float *restrict out) {
    for (int64_t t = 0; t < T; t++) {
        float *restrict x = h + t * n;
        float ss = 0.0f;
        if (delta != NULL) {
            const float *restrict d = delta + t * n;
#pragma omp simd reduction(+ : ss)
            for (int64_t i = 0; i < n; i++) {
                const float v = x[i] + d[i];
                x[i] = v;
                ss += v * v;
            }
        } else {
#pragma omp simd reduction(+ : ss)
            for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
        }
        const float r = 1.0f / sqrtf(ss / (float)n + eps);
        float *restrict o = out + t * n;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) o[i] = w[i] * (x[i] * r);
    }
}

/* out[t, i] = silu(gu[t, i]) * gu[t, inter + i] (SwiGLU, Shazeer 2020); gu: [T, 2 inter], out: [T, inter]. */
void silu_mul(const float *restrict gu, int64_t T, int64_t inter, float *restrict out) {
    for (int64_t t = 0; t < T; t++) {
        const float *restrict g = gu + t * 2 * inter;
        const float *restrict u = g + inter;
        float *restrict o = out + t * inter;
#pragma omp simd
        for (int64_t i = 0; i < inter; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

/* ---- panel linear: out[M, N] = x[M, K] @ w[N, K]^T on a weight packed once into 48-column panels ----
 * Layout (pack_panels): wp[p][k][j] = w[48 p + j][k], N zero-padded up to a multiple of 48, so one
 * panel [K][48] is contiguous and the packed weight is read as one sequential stream.
 * Compute (AVX-512): per panel, blocks of 8 rows of x; a block keeps its 8 x 48 outputs in 24 zmm
 * accumulators and, per k, broadcasts x[m][k] against three 16-wide loads of wp[p][k] (the register
 * blocking of GotoBLAS/BLIS: Goto & van de Geijn 2008, "Anatomy of high-performance matrix
 * multiplication", section 5). The panel (K x 192 bytes: 110 KB at K = 576) stays in L2 for the later
 * blocks; meanwhile each block prefetches its share of the next panel into L2 (one cache line per k),
 * so the memory stream overlaps the FMAs instead of stalling the first block, and the first block
 * also prefetches its own panel 16 k-steps ahead into L1 (all a 1..8-row decode has).
 * Rows of x and out are contiguous (K and N floats). Single-threaded. A plain C loop elsewhere. */
#define PANEL_N 48

void pack_panels(const float *restrict w, int64_t N, int64_t K, float *restrict wp) {
    const int64_t np = (N + PANEL_N - 1) / PANEL_N;
    for (int64_t p = 0; p < np; p++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < PANEL_N; j++) {
                const int64_t n = p * PANEL_N + j;
                wp[(p * K + k) * PANEL_N + j] = n < N ? w[n * K + k] : 0.0f;
            }
}

#if defined(__AVX512F__)
#include <immintrin.h>

static inline __mmask16 col_mask(int64_t valid) {
    return valid >= 16 ? (__mmask16)0xFFFF : valid <= 0 ? (__mmask16)0 : (__mmask16)((1u << valid) - 1u);
}

/* MR rows of x against one panel b [K][48]: out[m][0..47] for m < MR (columns masked by m0..m2);
 * prefetches npf lines of pf into L2 (one per k), and, if stream, b itself 16 k-steps ahead into L1. */
#define PANEL_BLOCK(MR)                                                                                  \
    static inline __attribute__((always_inline)) void panel_block_##MR(                                  \
        const float *restrict x, int64_t K, const float *restrict b, float *restrict out, int64_t ldo,   \
        __mmask16 m0, __mmask16 m1, __mmask16 m2, const float *pf, int64_t npf, int stream) {            \
        __m512 a0[MR], a1[MR], a2[MR];                                                                  \
        _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {                                          \
            a0[m] = _mm512_setzero_ps(); a1[m] = a0[m]; a2[m] = a0[m];                                  \
        }                                                                                               \
        for (int64_t k = 0; k < K; k++) {                                                               \
            const float *bk = b + k * PANEL_N;                                                          \
            if (stream) {                                                                               \
                _mm_prefetch((const char *)(bk + 16 * PANEL_N), _MM_HINT_T0);                           \
                _mm_prefetch((const char *)(bk + 16 * PANEL_N + 16), _MM_HINT_T0);                      \
                _mm_prefetch((const char *)(bk + 16 * PANEL_N + 32), _MM_HINT_T0);                      \
            }                                                                                           \
            if (k < npf) _mm_prefetch((const char *)(pf + k * 16), _MM_HINT_T1);                        \
            const __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16), b2 = _mm512_loadu_ps(bk + 32); \
            _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {                                      \
                const __m512 xv = _mm512_set1_ps(x[m * K + k]);                                         \
                a0[m] = _mm512_fmadd_ps(xv, b0, a0[m]);                                                 \
                a1[m] = _mm512_fmadd_ps(xv, b1, a1[m]);                                                 \
                a2[m] = _mm512_fmadd_ps(xv, b2, a2[m]);                                                 \
            }                                                                                           \
        }                                                                                               \
        _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {                                          \
            _mm512_mask_storeu_ps(out + m * ldo, m0, a0[m]);                                            \
            _mm512_mask_storeu_ps(out + m * ldo + 16, m1, a1[m]);                                       \
            _mm512_mask_storeu_ps(out + m * ldo + 32, m2, a2[m]);                                       \
        }                                                                                               \
    }
PANEL_BLOCK(1) PANEL_BLOCK(2) PANEL_BLOCK(3) PANEL_BLOCK(4)
PANEL_BLOCK(5) PANEL_BLOCK(6) PANEL_BLOCK(7) PANEL_BLOCK(8)
#undef PANEL_BLOCK

/* wp from pack_panels(w, N, K). Returns 0, or -1 when M < 1. */
int panel_linear(const float *restrict x, int64_t M, int64_t K, const float *restrict wp, int64_t N,
                 float *restrict out) {
    if (M < 1) return -1;
    const int64_t np = (N + PANEL_N - 1) / PANEL_N;
    const int64_t blocks = (M + 7) / 8;
    const int64_t lines = K * PANEL_N / 16;            /* 64-byte lines in one panel */
    const int64_t share = (lines + blocks - 1) / blocks; /* lines of the next panel each block prefetches */
    for (int64_t p = 0; p < np; p++) {
        const float *b = wp + p * K * PANEL_N;
        const float *next = b + K * PANEL_N;
        const int64_t valid = N - p * PANEL_N;
        const __mmask16 m0 = col_mask(valid), m1 = col_mask(valid - 16), m2 = col_mask(valid - 32);
        float *o = out + p * PANEL_N;
        for (int64_t blk = 0; blk < blocks; blk++) {
            const int64_t m = blk * 8, rows = M - m < 8 ? M - m : 8;
            int64_t npf = p + 1 < np ? lines - blk * share : 0;
            npf = npf < 0 ? 0 : npf < share ? npf : share;
            npf = npf < K ? npf : K;
            const float *xm = x + m * K, *pf = next + blk * share * 16;
            float *om = o + m * N;
            switch (rows) {
                case 1: panel_block_1(xm, K, b, om, N, m0, m1, m2, pf, npf, blk == 0); break;
                case 2: panel_block_2(xm, K, b, om, N, m0, m1, m2, pf, npf, blk == 0); break;
                case 3: panel_block_3(xm, K, b, om, N, m0, m1, m2, pf, npf, blk == 0); break;
                case 4: panel_block_4(xm, K, b, om, N, m0, m1, m2, pf, npf, blk == 0); break;
                case 5: panel_block_5(xm, K, b, om, N, m0, m1, m2, pf, npf, blk == 0); break;
                case 6: panel_block_6(xm, K, b, om, N, m0, m1, m2, pf, npf, blk == 0); break;
                case 7: panel_block_7(xm, K, b, om, N, m0, m1, m2, pf, npf, blk == 0); break;
                default: panel_block_8(xm, K, b, om, N, m0, m1, m2, pf, npf, blk == 0); break;
            }
        }
    }
    return 0;
}
int panel_linear_vectorized(void) { return 1; }
#else
int panel_linear(const float *restrict x, int64_t M, int64_t K, const float *restrict wp, int64_t N,
                 float *restrict out) {
    if (M < 1) return -1;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const float *b = wp + (n / PANEL_N) * K * PANEL_N + n % PANEL_N;
            float a = 0.0f;
            for (int64_t k = 0; k < K; k++) a += x[m * K + k] * b[k * PANEL_N];
            out[m * N + n] = a;
        }
    return 0;
}
int panel_linear_vectorized(void) { return 0; }
#endif

/* ---- a whole decode-only forward: every decoder layer in one call ----
 * The same kernels, in the same order, as own_engine/model.py's _forward_native, for a step whose
 * tokens are all short queries with cached context (decodes, speculative verification: every row is
 * in the decode group, no prefill chunk), so nothing in a layer needs PyTorch; one ctypes call
 * replaces ~9 per layer (their Python glue is ~3 ms of a ~41 ms batch-1 step on the default model).
 * layer_ptrs: [L][8] addresses per layer: input RMSNorm weight [hidden], qkv panels, o panels,
 * post-attention RMSNorm weight, gate_up panels, down panels (pack_panels layouts of weights
 * [(H + 2 nkv) D, hidden], [hidden, H D], [2 inter, hidden], [hidden, inter]), k_cache, v_cache.
 * h: [T, hidden] the embedded tokens (the residual stream, updated in place); x: [T, hidden] gets the
 * final-normed hidden states (by final_norm). Work buffers: qkv [T, (H + 2 nkv) D], attn [T, H D],
 * delta [T, hidden], gu [T, 2 inter], act [T, inter]; scratch as for paged_decode_attention.
 * rows/seq/lens/n: the decode group (rows must cover all T tokens). Returns 0, or the first nonzero
 * return of a kernel (-1: H not a multiple of nkv, or T < 1). */
int decode_forward(int64_t L, const int64_t *restrict layer_ptrs, float *restrict h, float *restrict x,
                   float *restrict qkv, float *restrict attn, float *restrict delta, float *restrict gu,
                   float *restrict act, int64_t T, int64_t hidden, int64_t inter, int64_t H, int64_t nkv,
                   int64_t D, float eps, float scale, const float *restrict cos_t, const float *restrict sin_t,
                   const int64_t *restrict positions, const int64_t *restrict slot_mapping,
                   const int64_t *restrict block_tables, int64_t bt_stride, const int64_t *restrict rows,
                   const int64_t *restrict seq, const int64_t *restrict lens, int64_t n, int64_t block_size,
                   const float *restrict final_norm, float *restrict scratch) {
    if (T < 1 || nkv < 1 || H % nkv != 0) return -1;
    const int64_t nqkv = (H + 2 * nkv) * D;
    int rc;
    add_rms_norm(h, NULL, (const float *)(intptr_t)layer_ptrs[0], eps, T, hidden, x);
    for (int64_t l = 0; l < L; l++) {
        const int64_t *p = layer_ptrs + 8 * l;
        float *k_cache = (float *)(intptr_t)p[6], *v_cache = (float *)(intptr_t)p[7];
        if ((rc = panel_linear(x, T, hidden, (const float *)(intptr_t)p[1], nqkv, qkv)) != 0) return rc;
        rope_kv_write(qkv, nqkv, T, H, nkv, D, cos_t, sin_t, positions, k_cache, v_cache, slot_mapping);
        if ((rc = paged_decode_attention(qkv, nqkv, D, k_cache, v_cache, block_tables, bt_stride, rows, seq, lens,
                                         n, H, nkv, D, block_size, scale, attn, H * D, D, scratch)) != 0)
            return rc;
        if ((rc = panel_linear(attn, T, H * D, (const float *)(intptr_t)p[2], hidden, delta)) != 0) return rc;
        add_rms_norm(h, delta, (const float *)(intptr_t)p[3], eps, T, hidden, x);
        if ((rc = panel_linear(x, T, hidden, (const float *)(intptr_t)p[4], 2 * inter, gu)) != 0) return rc;
        silu_mul(gu, T, inter, act);
        if ((rc = panel_linear(act, T, inter, (const float *)(intptr_t)p[5], hidden, delta)) != 0) return rc;
        const float *next_norm = l + 1 < L ? (const float *)(intptr_t)layer_ptrs[8 * (l + 1)] : final_norm;
        add_rms_norm(h, delta, next_norm, eps, T, hidden, x);
    }
    return 0;
}
