// Session 33 experiment (issue 31): batch-1 q4_k and q8_0_split GEMVs in CUDA C, to measure what a
// kernel of the nvidia backend's own could reach beside the Triton one. out[N] = W[N, K] x[K], W in
// the format's rows (plugin_api/weight_formats.py), x bfloat16, K a multiple of 512.
//
// Each block first rounds x to int8 in shared memory, a scale and a float sum per 32 inputs (as the
// Triton GEMV does per program for q4_k), and each warp then takes ROWS rows, summed with dp4a.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifdef __CUDACC_RTC__          // nvrtc (nvrtc_probe.py) has no C library headers
typedef unsigned char uint8_t;
typedef signed char int8_t;
#else
#include <stdint.h>
#endif

#define WARPS 8

__device__ __forceinline__ int byte_of(unsigned w, int i) { return (w >> (8 * i)) & 0xFF; }

// Six-bit scale and min of sub-block j (0..7) from the header's words y (bytes 4-7), z (8-11), w (12-15).
__device__ __forceinline__ void scale_min(unsigned y, unsigned z, unsigned w, int j, float &sc, float &m) {
  if (j < 4) {
    sc = (float)(byte_of(y, j) & 63);
    m = (float)(byte_of(z, j) & 63);
  } else {
    sc = (float)((byte_of(w, j - 4) & 0x0F) | ((byte_of(y, j - 4) >> 6) << 4));
    m = (float)((byte_of(w, j - 4) >> 4) | ((byte_of(z, j - 4) >> 6) << 4));
  }
}

// The warp's ROWS rows asked for into the L2 (a lane a 128-byte line), so that they are on their way
// while x is rounded.
template <int ROWS>
__device__ __forceinline__ void prefetch_rows(const uint8_t *weight, int N, long long row_bytes, int lane, int warp) {
  for (int r = 0; r < ROWS; r++) {
    const long long row = (long long)(blockIdx.x * WARPS + warp) * ROWS + r;
    if (row < N)
      for (long long at = lane * 128; at < row_bytes; at += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(weight + row * row_bytes + at));
  }
}

// x [K] rounded into shared memory: int8 codes [K], then a scale dx and a float sum sx per 32 inputs.
// A lane takes 8 inputs (16 bytes); 4 lanes make a group of 32.
__device__ __forceinline__ void round_x(const __nv_bfloat16 *__restrict__ x, int K, int8_t *codes, float *dx,
                                        float *sx, int lane, int warp) {
  for (int base = warp * 256; base < K; base += WARPS * 256) {
    int at = base + lane * 8;
    const uint4 raw = *(const uint4 *)(x + at);
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
    float f[8], amax = 0.f, sum = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {      // a bfloat16 is a float's high half
      f[2 * i] = __uint_as_float(words[i] << 16);
      f[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
#pragma unroll
    for (int i = 0; i < 8; i++) { amax = fmaxf(amax, fabsf(f[i])); sum += f[i]; }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    float d = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
    unsigned lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      lo |= ((unsigned)(__float2int_rn(f[i] * inv) & 0xFF)) << (8 * i);
      hi |= ((unsigned)(__float2int_rn(f[i + 4] * inv) & 0xFF)) << (8 * i);
    }
    *(int2 *)(codes + at) = make_int2((int)lo, (int)hi);
    if ((lane & 3) == 0) { dx[at / 32] = d; sx[at / 32] = sum; }
  }
}

// Each lane's partial sums of ROWS rows added up across the warp; lane 0 writes them.
template <int ROWS>
__device__ __forceinline__ void store_rows(const float (&acc)[ROWS], __nv_bfloat16 *out, int row0, int N, int lane) {
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    float v = acc[r];
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && row0 + r < N) out[row0 + r] = __float2bfloat16(v);
  }
}

// x rounded into shared memory (round_x's three arrays).
struct RoundedX {
  int8_t *codes;
  float *dx, *sx;
};

// A block's start, the same for every GEMV: its rows asked for (PREFETCH), x rounded into shared memory
// (ROUND), then the barrier after which every warp reads it.
template <int ROWS, bool PREFETCH, bool ROUND>
__device__ __forceinline__ RoundedX begin_block(const uint8_t *weight, const __nv_bfloat16 *__restrict__ x, int N,
                                                int K, long long row_bytes, int lane, int warp) {
  extern __shared__ int4 shared[];
  int8_t *codes = (int8_t *)shared;
  float *dx = (float *)(codes + K), *sx = dx + K / 32;
  if (PREFETCH) prefetch_rows<ROWS>(weight, N, row_bytes, lane, warp);
  if (ROUND) round_x(x, K, codes, dx, sx, lane, warp);
  __syncthreads();
  return RoundedX{codes, dx, sx};
}

// ROUND false skips x's rounding and computes garbage: a timing of the GEMV without its rounding, the
// most a pre-rounded x could save.
template <int ROWS, int UNROLL, bool PREFETCH, bool ROUND = true>
__device__ __forceinline__ void q4k(const uint8_t *__restrict__ weight, const __nv_bfloat16 *__restrict__ x,
                                    __nv_bfloat16 *__restrict__ out, int N, int K, long long row_bytes) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const auto [codes, dx, sx] = begin_block<ROWS, PREFETCH, ROUND>(weight, x, N, K, row_bytes, lane, warp);
  const int row0 = (blockIdx.x * WARPS + warp) * ROWS;
  if (row0 >= N) return;
  const int chunk = lane & 7, pair = chunk >> 1, half = chunk & 1;
  const int blocks = K / 256;
  float acc[ROWS] = {};

#pragma unroll UNROLL
  for (int s = lane >> 3; s < blocks; s += 4) {
    const int4 x_low = *(const int4 *)(codes + s * 256 + 64 * pair + 16 * half);
    const int4 x_high = *(const int4 *)(codes + s * 256 + 64 * pair + 32 + 16 * half);
    const float dx_low = dx[s * 8 + 2 * pair], dx_high = dx[s * 8 + 2 * pair + 1];
    const float sx_low = sx[s * 8 + 2 * pair], sx_high = sx[s * 8 + 2 * pair + 1];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      const int row = row0 + r;
      if (row < N) {
        const uint8_t *block = weight + row * row_bytes + s * 144;
        const uint4 head = __ldg((const uint4 *)block);
        const uint4 q = __ldg((const uint4 *)(block + 16 + 16 * chunk));
        int dot_low = 0, dot_high = 0;
        dot_low = __dp4a((int)(q.x & 0x0F0F0F0Fu), x_low.x, dot_low);
        dot_low = __dp4a((int)(q.y & 0x0F0F0F0Fu), x_low.y, dot_low);
        dot_low = __dp4a((int)(q.z & 0x0F0F0F0Fu), x_low.z, dot_low);
        dot_low = __dp4a((int)(q.w & 0x0F0F0F0Fu), x_low.w, dot_low);
        dot_high = __dp4a((int)((q.x >> 4) & 0x0F0F0F0Fu), x_high.x, dot_high);
        dot_high = __dp4a((int)((q.y >> 4) & 0x0F0F0F0Fu), x_high.y, dot_high);
        dot_high = __dp4a((int)((q.z >> 4) & 0x0F0F0F0Fu), x_high.z, dot_high);
        dot_high = __dp4a((int)((q.w >> 4) & 0x0F0F0F0Fu), x_high.w, dot_high);
        const float d = __half2float(__ushort_as_half((unsigned short)(head.x & 0xFFFFu)));
        const float dmin = __half2float(__ushort_as_half((unsigned short)(head.x >> 16)));
        float sc_low, m_low, sc_high, m_high;
        scale_min(head.y, head.z, head.w, 2 * pair, sc_low, m_low);
        scale_min(head.y, head.z, head.w, 2 * pair + 1, sc_high, m_high);
        float part = d * (sc_low * dx_low * (float)dot_low + sc_high * dx_high * (float)dot_high);
        if (half == 0) part -= dmin * (m_low * sx_low + m_high * sx_high);    // once a sub-block pair
        acc[r] += part;
      }
    }
  }
  store_rows<ROWS>(acc, out, row0, N, lane);
}

// q8_0_split (plugin_api/weight_formats.py): a row's K int8 codes, then its K / 32 float16 scales. A
// lane reads 16 codes (half a block) and its block's scale; a warp 512 codes of a row a step.
template <int ROWS, int UNROLL, bool PREFETCH>
__device__ __forceinline__ void q8s(const uint8_t *__restrict__ weight, const __nv_bfloat16 *__restrict__ x,
                                    __nv_bfloat16 *__restrict__ out, int N, int K, long long row_bytes) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const auto [codes, dx, sx] = begin_block<ROWS, PREFETCH, true>(weight, x, N, K, row_bytes, lane, warp);
  const int row0 = (blockIdx.x * WARPS + warp) * ROWS;
  if (row0 >= N) return;
  float acc[ROWS] = {};
#pragma unroll UNROLL
  for (int at = lane * 16; at < K; at += 512) {
    const int4 xw = *(const int4 *)(codes + at);
    const float scale_x = dx[at / 32];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      const int row = row0 + r;
      if (row < N) {
        const uint8_t *base = weight + row * row_bytes;
        const int4 q = __ldg((const int4 *)(base + at));
        const float d = __half2float(__ldg((const __half *)(base + K) + at / 32));
        int dot = __dp4a(q.x, xw.x, 0);
        dot = __dp4a(q.y, xw.y, dot);
        dot = __dp4a(q.z, xw.z, dot);
        dot = __dp4a(q.w, xw.w, dot);
        acc[r] += d * scale_x * (float)dot;
      }
    }
  }
  store_rows<ROWS>(acc, out, row0, N, lane);
}

// Variants by rows a warp (loads in flight a lane), steps unrolled and rows prefetched; grid: ceil(N /
// (8 * ROWS)) blocks of 256 threads, K + K / 4 bytes of dynamic shared memory.
#define VARIANT(NAME, BODY, ROWS, UNROLL, PREFETCH, ...) \
  extern "C" __global__ void __launch_bounds__(WARPS * 32) NAME(const uint8_t *__restrict__ w, \
      const __nv_bfloat16 *__restrict__ x, __nv_bfloat16 *__restrict__ out, int N, int K, long long row_bytes) { \
    BODY<ROWS, UNROLL, PREFETCH, ##__VA_ARGS__>(w, x, out, N, K, row_bytes); }
VARIANT(q4k_gemv_r1, q4k, 1, 1, false)
VARIANT(q4k_gemv_r2, q4k, 2, 1, false)
VARIANT(q4k_gemv_r4, q4k, 4, 1, false)
VARIANT(q4k_gemv_r2_u2, q4k, 2, 2, false)
VARIANT(q4k_gemv_r1_u4, q4k, 1, 4, false)
VARIANT(q4k_gemv_r2_pf, q4k, 2, 1, true)
VARIANT(q4k_gemv_r4_pf, q4k, 4, 1, true)
VARIANT(q4k_gemv_r2_unrounded, q4k, 2, 1, false, false)
VARIANT(q8s_gemv_r1, q8s, 1, 1, false)
VARIANT(q8s_gemv_r2, q8s, 2, 1, false)
VARIANT(q8s_gemv_r4, q8s, 4, 1, false)
VARIANT(q8s_gemv_r2_u2, q8s, 2, 2, false)
VARIANT(q8s_gemv_r1_u4, q8s, 1, 4, false)
VARIANT(q8s_gemv_r2_pf, q8s, 2, 1, true)
VARIANT(q8s_gemv_r4_pf, q8s, 4, 1, true)
