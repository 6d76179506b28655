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
#if defined(__AVX512F__)
#include <immintrin.h>

/* exp(x), 16 lanes: 2^n * p(r) with n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts) and the
 * degree-6 polynomial of Cephes' expf; scalef applies 2^n. Relative error ~1e-7 (as expf). Inputs
 * at or below -87 give 0 (never a denormal: the library does not set flush-to-zero, and denormal
 * arithmetic is slow), above 88 are clamped to exp(88). */
static inline __m512 exp512(__m512 x) {
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  /* x - n ln2, ln2 in two parts */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
}
#endif

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

/* out[t, i] = silu(gu[t, i]) * gu[t, inter + i] (SwiGLU, Shazeer 2020); gu: [T, 2 inter], out: [T, inter].
 * Finite for any finite input (silu(g) = g / (1 + exp(-g)) with exp's argument clamped at 88). */
void silu_mul(const float *restrict gu, int64_t T, int64_t inter, float *restrict out) {
    for (int64_t t = 0; t < T; t++) {
        const float *restrict g = gu + t * 2 * inter;
        const float *restrict u = g + inter;
        float *restrict o = out + t * inter;
        int64_t i = 0;
#if defined(__AVX512F__)
        const __m512 one = _mm512_set1_ps(1.0f);
        for (; i + 16 <= inter; i += 16) {  /* 16 lanes with exp512 (libmvec's expf is 8 wide here) */
            const __m512 gv = _mm512_loadu_ps(g + i);
            const __m512 den = _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv)));
            _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_div_ps(gv, den), _mm512_loadu_ps(u + i)));
        }
#endif
        /* exp's argument clamped: -ffast-math assumes no infinities, and exp(-g) overflowing for
         * g < -88 gave NaN (g / inf) where silu(g) is -0 */
        for (; i < inter; i++) o[i] = g[i] / (1.0f + expf(fminf(-g[i], 88.0f))) * u[i];
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

/* ---- prefill attention over the paged cache (AVX-512, head_dim 64) ----
 * One prefill chunk of one sequence: query i (0 <= i < q_len) sits at position ctx_len - q_len + i
 * and attends to keys 0 .. its position (causal), all read through the block table bt (the chunk's
 * own K/V are already in the cache: rope_kv_write runs first). Flash-attention style (Dao et al.
 * 2022, "FlashAttention", Algorithm 1; the online softmax of Milakov & Gimelshein 2018): per query
 * head, tiles of PF_R query rows walk the keys in blocks of PF_KB = 16, keeping a running max m, sum
 * l and output accumulator per row, so the [q_len, ctx_len] score matrix is never stored. Scores
 * come 16 keys per vector from K^T packed once per KV head (kt: ceil(ctx_len / 16) * 16 * 64 floats,
 * 64-byte aligned), so no horizontal sum per key: the register blocking of the panel GEMM above. The
 * G query heads of a KV head share its packed K^T (GQA). exp is a degree-6 polynomial (Cephes expf)
 * scaled by 2^n with scalef: relative error ~1e-7, as expf.
 * q: [q_len, H, 64] at strides (q_st_t, q_st_h); out likewise (o_st_t, o_st_h).
 * Returns 0; -1 for a shape it does not take (D != 64, H not a multiple of nkv, ctx_len < q_len). */
#if defined(__AVX512F__)
#define PF_R 6
#define PF_KB 16
#define PF_D 64


int prefill_attention_paged(const float *restrict q, int64_t q_st_t, int64_t q_st_h,
                            const float *restrict k_cache, const float *restrict v_cache,
                            const int64_t *restrict bt, int64_t q_len, int64_t ctx_len, int64_t H, int64_t nkv,
                            int64_t D, int64_t block_size, float scale, float *restrict out, int64_t o_st_t,
                            int64_t o_st_h, float *restrict kt) {
    if (D != PF_D || nkv < 1 || H % nkv != 0 || q_len < 1 || ctx_len < q_len || block_size < 1) return -1;
    const int64_t G = H / nkv, row = nkv * PF_D, nkb = (ctx_len + PF_KB - 1) / PF_KB, p0 = ctx_len - q_len;
    const __m512 vscale = _mm512_set1_ps(scale);
    const int same_block = block_size % PF_KB == 0;
    for (int64_t g = 0; g < nkv; g++) {
        for (int64_t b = 0; b < nkb; b++) {  /* kt[b][d][j] = K[16 b + j][g][d], zero past ctx_len */
            float *restrict dst = kt + b * PF_D * PF_KB;
            for (int64_t j = 0; j < PF_KB; j++) {
                const int64_t key = b * PF_KB + j;
                if (key < ctx_len) {
                    const float *restrict src = k_cache + (bt[key / block_size] * block_size + key % block_size) * row + g * PF_D;
                    for (int64_t d = 0; d < PF_D; d++) dst[d * PF_KB + j] = src[d];
                } else {
                    for (int64_t d = 0; d < PF_D; d++) dst[d * PF_KB + j] = 0.0f;
                }
            }
        }
        for (int64_t hh = 0; hh < G; hh++) {
            const int64_t h = g * G + hh;
            for (int64_t i0 = 0; i0 < q_len; i0 += PF_R) {
                const int64_t nr = q_len - i0 < PF_R ? q_len - i0 : PF_R;
                const float *qr[PF_R];
                int64_t pos[PF_R];
                float m[PF_R];
                __m512 o0[PF_R], o1[PF_R], o2[PF_R], o3[PF_R], lv[PF_R];  /* lv: the running sum, per lane */
                for (int r = 0; r < PF_R; r++) {  /* a short last tile repeats its last row (not stored) */
                    const int64_t i = i0 + (r < nr ? r : nr - 1);
                    qr[r] = q + i * q_st_t + h * q_st_h;
                    pos[r] = p0 + i;
                    m[r] = -1e30f;
                    o0[r] = _mm512_setzero_ps(); o1[r] = o0[r]; o2[r] = o0[r]; o3[r] = o0[r]; lv[r] = o0[r];
                }
                const int64_t nb = pos[PF_R - 1] / PF_KB + 1;  /* key blocks up to the tile's last position */
                for (int64_t b = 0; b < nb; b++) {
                    const float *restrict kb = kt + b * PF_D * PF_KB;
                    const int64_t key0 = b * PF_KB;
                    __m512 s[PF_R];
                    for (int r = 0; r < PF_R; r++) s[r] = _mm512_setzero_ps();
                    for (int64_t d = 0; d < PF_D; d++) {
                        const __m512 kv = _mm512_load_ps(kb + d * PF_KB);
                        for (int r = 0; r < PF_R; r++) s[r] = _mm512_fmadd_ps(_mm512_set1_ps(qr[r][d]), kv, s[r]);
                    }
                    float p[PF_R][PF_KB] __attribute__((aligned(64)));
                    for (int r = 0; r < PF_R; r++) {
                        const int64_t nvalid = pos[r] - key0 + 1;  /* keys of this block at or before pos[r] */
                        const __mmask16 vm = nvalid >= PF_KB ? (__mmask16)0xFFFF
                                             : nvalid <= 0 ? (__mmask16)0 : (__mmask16)((1u << nvalid) - 1u);
                        if (vm == 0) {  /* an earlier row of the tile: nothing to see in this block */
                            _mm512_store_ps(p[r], _mm512_setzero_ps());
                            continue;
                        }
                        const __m512 sr = _mm512_mul_ps(s[r], vscale);
                        const float bm = _mm512_mask_reduce_max_ps(vm, sr);
                        if (bm > m[r]) {  /* a new running max: rescale what was summed so far */
                            const __m512 va = _mm512_set1_ps(expf(m[r] - bm));
                            o0[r] = _mm512_mul_ps(o0[r], va); o1[r] = _mm512_mul_ps(o1[r], va);
                            o2[r] = _mm512_mul_ps(o2[r], va); o3[r] = _mm512_mul_ps(o3[r], va);
                            lv[r] = _mm512_mul_ps(lv[r], va);
                            m[r] = bm;
                        }
                        const __m512 e = _mm512_maskz_mov_ps(vm, exp512(_mm512_sub_ps(sr, _mm512_set1_ps(m[r]))));
                        lv[r] = _mm512_add_ps(lv[r], e);
                        _mm512_store_ps(p[r], e);
                    }
                    const int64_t nk = ctx_len - key0 < PF_KB ? ctx_len - key0 : PF_KB;
                    /* the 16 keys lie in one cache block when block_size is a multiple of 16 (no division per key) */
                    const float *restrict vblk = v_cache + (bt[key0 / block_size] * block_size + key0 % block_size) * row + g * PF_D;
                    for (int64_t j = 0; j < nk; j++) {
                        const int64_t key = key0 + j;
                        const float *restrict vr = same_block ? vblk + j * row
                            : v_cache + (bt[key / block_size] * block_size + key % block_size) * row + g * PF_D;
                        const __m512 v0 = _mm512_loadu_ps(vr), v1 = _mm512_loadu_ps(vr + 16);
                        const __m512 v2 = _mm512_loadu_ps(vr + 32), v3 = _mm512_loadu_ps(vr + 48);
                        for (int r = 0; r < PF_R; r++) {
                            const __m512 pj = _mm512_set1_ps(p[r][j]);
                            o0[r] = _mm512_fmadd_ps(pj, v0, o0[r]); o1[r] = _mm512_fmadd_ps(pj, v1, o1[r]);
                            o2[r] = _mm512_fmadd_ps(pj, v2, o2[r]); o3[r] = _mm512_fmadd_ps(pj, v3, o3[r]);
                        }
                    }
                }
                for (int r = 0; r < nr; r++) {
                    float *restrict dst = out + (i0 + r) * o_st_t + h * o_st_h;
                    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(lv[r]));
                    _mm512_storeu_ps(dst, _mm512_mul_ps(o0[r], inv));
                    _mm512_storeu_ps(dst + 16, _mm512_mul_ps(o1[r], inv));
                    _mm512_storeu_ps(dst + 32, _mm512_mul_ps(o2[r], inv));
                    _mm512_storeu_ps(dst + 48, _mm512_mul_ps(o3[r], inv));
                }
            }
        }
    }
    return 0;
}
#else
int prefill_attention_paged(const float *restrict q, int64_t q_st_t, int64_t q_st_h,
                            const float *restrict k_cache, const float *restrict v_cache,
                            const int64_t *restrict bt, int64_t q_len, int64_t ctx_len, int64_t H, int64_t nkv,
                            int64_t D, int64_t block_size, float scale, float *restrict out, int64_t o_st_t,
                            int64_t o_st_h, float *restrict kt) {
    return -1;  /* no AVX-512: the caller keeps PyTorch's SDPA */
}
#endif
