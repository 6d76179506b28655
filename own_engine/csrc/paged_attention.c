/* Paged attention for short queries (decodes, speculative verification) straight from the block-table
 * KV cache, and the KV write. CPU, one thread, fp32. Compiled on first use by own_engine/cpu_kernels.py
 * (gcc -O3 -march=native -ffast-math -fopenmp-simd); called through ctypes with raw pointers.
 *
 * Layout (vLLM's): k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim] contiguous, so a
 * cache slot s = block * block_size + offset holds num_kv_heads rows of head_dim floats.
 *
 * For each query token i the keys are positions 0 .. lens[i]-1 of its sequence, found through
 * block_tables[seq[i]] (causal by construction: lens[i] = its position + 1). GQA: the G = H / nkv query
 * heads sharing a KV head are scored together, so every K and V row is read once per token.
 * Softmax is two-pass (max, then exp-sum), as in the reference definition softmax(q k^T * scale) v
 * (Vaswani et al. 2017, eq. 1). The gathered copy of the context that a PyTorch SDPA call needs is
 * never made.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_G 16

/* k_new, v_new: [T, nkv, D] rows with strides (token, head) in floats; slot_mapping [T]. */
void kv_write(const float *k_new, int64_t k_st_t, int64_t k_st_h, const float *v_new, int64_t v_st_t,
              int64_t v_st_h, float *k_cache, float *v_cache, const int64_t *slot_mapping, int64_t T,
              int64_t nkv, int64_t D) {
    for (int64_t t = 0; t < T; t++) {
        const int64_t s = slot_mapping[t];
        for (int64_t h = 0; h < nkv; h++) {
            memcpy(k_cache + (s * nkv + h) * D, k_new + t * k_st_t + h * k_st_h, (size_t)D * sizeof(float));
            memcpy(v_cache + (s * nkv + h) * D, v_new + t * v_st_t + h * v_st_h, (size_t)D * sizeof(float));
        }
    }
}

/* One (query token, KV head): the G query heads of KV head kh attend to keys 0 .. L-1 of the
 * sequence's block table. Inlined with D a compile-time constant (64, 128) so the dot products
 * unroll and q stays in registers. sc: [G, L] scratch; acc: [G, D] scratch. */
static inline __attribute__((always_inline)) void attend_one(
        const float *restrict qb, int64_t q_st_h, const float *restrict k_cache,
        const float *restrict v_cache, const int64_t *restrict bt, int64_t L, int64_t G, int64_t kh,
        const int64_t row, const int64_t D, int64_t block_size, float scale, float *restrict ob,
        int64_t o_st_h, float *restrict sc, float *restrict acc) {
    float mx[MAX_G], sum[MAX_G];
    const int64_t nblk = (L + block_size - 1) / block_size;
    for (int64_t g = 0; g < G; g++) mx[g] = -INFINITY;
    /* pass 1: sc[g * L + j] = scale * q_g . k_j */
    for (int64_t b = 0; b < nblk; b++) {
        const float *restrict kb = k_cache + bt[b] * block_size * row + kh * D;
        const int64_t j0 = b * block_size;
        const int64_t m = (L - j0 < block_size) ? L - j0 : block_size;
        for (int64_t o = 0; o < m; o++) {
            const float *restrict kr = kb + o * row;
            for (int64_t g = 0; g < G; g++) {
                const float *restrict qg = qb + g * q_st_h;
                float a = 0.0f;
#pragma omp simd reduction(+ : a)
                for (int64_t d = 0; d < D; d++) a += qg[d] * kr[d];
                a *= scale;
                sc[g * L + j0 + o] = a;
                mx[g] = a > mx[g] ? a : mx[g];
            }
        }
    }
    /* pass 2: p = exp(s - max) and its sum */
    for (int64_t g = 0; g < G; g++) {
        float *restrict sg = sc + g * L;
        const float mg = mx[g];
        float total = 0.0f;
#pragma omp simd reduction(+ : total)
        for (int64_t j = 0; j < L; j++) {
            const float e = expf(sg[j] - mg);
            sg[j] = e;
            total += e;
        }
        sum[g] = total;
    }
    /* pass 3: acc_g = sum_j p_j v_j, then out_g = acc_g / sum */
    for (int64_t x = 0; x < G * D; x++) acc[x] = 0.0f;
    for (int64_t b = 0; b < nblk; b++) {
        const float *restrict vb = v_cache + bt[b] * block_size * row + kh * D;
        const int64_t j0 = b * block_size;
        const int64_t m = (L - j0 < block_size) ? L - j0 : block_size;
        for (int64_t o = 0; o < m; o++) {
            const float *restrict vr = vb + o * row;
            for (int64_t g = 0; g < G; g++) {
                const float p = sc[g * L + j0 + o];
                float *restrict ag = acc + g * D;
#pragma omp simd
                for (int64_t d = 0; d < D; d++) ag[d] += p * vr[d];
            }
        }
    }
    for (int64_t g = 0; g < G; g++) {
        float *restrict og = ob + g * o_st_h;
        const float *restrict ag = acc + g * D;
        const float inv = 1.0f / sum[g];
#pragma omp simd
        for (int64_t d = 0; d < D; d++) og[d] = ag[d] * inv;
    }
}

/* q: [T, H, D] with strides (q_st_t, q_st_h); out: [T, H, D] with strides (o_st_t, o_st_h).
 * rows[i], seq[i], lens[i] for i < n: flat token index, block-table row, number of keys.
 * scratch: at least MAX_G * (max(lens) + D) floats. Returns 0, or -1 when G > MAX_G.
 * Keys are walked block by block (no division per key). */
int paged_decode_attention(const float *restrict q, int64_t q_st_t, int64_t q_st_h,
                           const float *restrict k_cache, const float *restrict v_cache,
                           const int64_t *restrict block_tables, int64_t bt_stride,
                           const int64_t *restrict rows, const int64_t *restrict seq,
                           const int64_t *restrict lens, int64_t n,
                           int64_t H, int64_t nkv, int64_t D, int64_t block_size, float scale,
                           float *restrict out, int64_t o_st_t, int64_t o_st_h, float *restrict scratch) {
    const int64_t G = H / nkv;
    if (G > MAX_G) return -1;
    const int64_t row = nkv * D; /* floats between consecutive slots */
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = rows[i], L = lens[i];
        const int64_t *restrict bt = block_tables + seq[i] * bt_stride;
        float *restrict sc = scratch;          /* [G, L] scores, then probabilities */
        float *restrict acc = scratch + G * L; /* [G, D] output accumulators */
        for (int64_t kh = 0; kh < nkv; kh++) {
            const float *restrict qb = q + t * q_st_t + kh * G * q_st_h;
            float *restrict ob = out + t * o_st_t + kh * G * o_st_h;
#define ATTEND(GG, DD) attend_one(qb, q_st_h, k_cache, v_cache, bt, L, GG, kh, row, DD, block_size, scale, ob, o_st_h, sc, acc)
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
    }
    return 0;
}
