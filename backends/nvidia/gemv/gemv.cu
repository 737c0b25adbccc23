// The nvidia backend's batch-1 GEMVs (anydev.backends.nvidia.gemv): out[N] = W[N, K] x[K] for one row
// x of bfloat16 and W in q4_k, q8_0_split, q6_k_split, q4_0 or q4_1 rows (plugin_api/weight_formats.py),
// K a multiple of 256 (of 2,048 for q6_k_split, whose rows are then 16-byte aligned).
// Compiled with nvrtc at first use, so it includes no header: the bfloat16 and float16 conversions are
// bit operations or single PTX instructions.
//
// A block of 8 warps first rounds x to int8 in shared memory (a scale and a float sum per 32 inputs);
// each warp then takes one row (q4_0 and q4_1: two), read 16 bytes a load and summed with dp4a. MODE
// is the programmatic dependent launch mode of the Triton kernels around it
// (backends/triton_kernels/_common.py): 0 off; otherwise wait until the kernel before has finished
// before reading x, then (1, 3) let the next one be scheduled; 3 first asks the L2 for the start of the
// warp's row, which no kernel before writes (q4_k, q6_k_split, q4_0, q4_1; q8_0_split's GEMVs are
// faster without it).
typedef unsigned char uint8_t;
typedef signed char int8_t;

#define WARPS 8

__device__ __forceinline__ int byte_of(unsigned w, int i) { return (w >> (8 * i)) & 0xFF; }

__device__ __forceinline__ float half_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ unsigned short float_to_bf16(float f) {
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
}

template <int MODE>
__device__ __forceinline__ void wait_for_inputs(const uint8_t *row, long long row_bytes, int lane) {
#if __CUDA_ARCH__ >= 900
  if (MODE == 3 && row != nullptr && lane * 128 < row_bytes)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(row + lane * 128));
  if (MODE > 0) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (MODE == 1 || MODE == 3) asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// x [K] rounded into shared memory: int8 codes [K], then a scale dx and a float sum sx per 32 inputs.
// A lane takes 8 inputs (16 bytes); 4 lanes make a group of 32. PADDED: 16 bytes after each 256 codes
// and a float after each 8 dx and sx (padded_code, padded_group), so that lanes reading the same
// offset of different 256-input runs find different banks.
__device__ __forceinline__ int padded_code(int at) { return at + 16 * (at / 256); }
__device__ __forceinline__ int padded_group(int g) { return g + g / 8; }

template <bool PADDED>
__device__ __forceinline__ void round_x(const unsigned short *__restrict__ x, int K, int8_t *codes, float *dx,
                                        float *sx, int lane, int warp) {
  for (int base = warp * 256; base < K; base += WARPS * 256) {
    const int at = base + lane * 8;
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
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    unsigned lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      lo |= ((unsigned)(__float2int_rn(f[i] * inv) & 0xFF)) << (8 * i);
      hi |= ((unsigned)(__float2int_rn(f[i + 4] * inv) & 0xFF)) << (8 * i);
    }
    *(int2 *)(codes + (PADDED ? padded_code(at) : at)) = make_int2((int)lo, (int)hi);
    const int g = PADDED ? padded_group(at / 32) : at / 32;
    if ((lane & 3) == 0) { dx[g] = amax / 127.f; sx[g] = sum; }
  }
}

// A block's start: the L2 asked for the warp's row (MODE 3, if ASK_L2), the wait for the kernel
// before, x rounded into shared memory, the barrier after which every warp reads it.
struct Rounded {
  int8_t *codes;
  float *dx, *sx;
};

// The warp's row (may be >= N).
__device__ __forceinline__ int warp_row() { return blockIdx.x * WARPS + (threadIdx.x >> 5); }

template <int MODE, bool ASK_L2, bool PADDED = false>
__device__ __forceinline__ Rounded begin_block(const uint8_t *weight, const unsigned short *__restrict__ x, int N,
                                               int K, long long row_bytes, int row) {
  extern __shared__ int4 shared[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int8_t *codes = (int8_t *)shared;
  float *dx = (float *)(codes + (PADDED ? padded_code(K) : K));
  float *sx = dx + (PADDED ? padded_group(K / 32) : K / 32);
  wait_for_inputs<MODE>(ASK_L2 && row < N ? weight + row * row_bytes : nullptr, row_bytes, lane);
  round_x<PADDED>(x, K, codes, dx, sx, lane, warp);
  __syncthreads();
  return Rounded{codes, dx, sx};
}

// The sum of v over each LANES lanes of the warp (every lane of the warp takes part in the shuffles),
// stored as bfloat16 at out[row] by the first of them if `store`.
template <int LANES = 32>
__device__ __forceinline__ void store_row(float v, unsigned short *out, int row, int lane, bool store = true) {
#pragma unroll
  for (int o = LANES / 2; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (store && lane % LANES == 0) out[row] = float_to_bf16(v);
}

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

// q4_k: 144-byte super-blocks of 256 values (a float16 d and dmin, 12 bytes of 6-bit scales and mins,
// 128 bytes of nibbles). Lane groups of 8 take a super-block; a lane 16 bytes of nibbles: 32 values of
// sub-block pair `pair` (low nibbles: sub-block 2 * pair, high: 2 * pair + 1).
template <int MODE>
__device__ __forceinline__ void q4k(const uint8_t *__restrict__ weight, const unsigned short *__restrict__ x,
                                    unsigned short *__restrict__ out, int N, int K, long long row_bytes) {
  const int row = warp_row();
  const auto [codes, dx, sx] = begin_block<MODE, true>(weight, x, N, K, row_bytes, row);
  if (row >= N) return;
  const int lane = threadIdx.x & 31, chunk = lane & 7, pair = chunk >> 1, half = chunk & 1;
  const uint8_t *row_start = weight + row * row_bytes;
  float acc = 0.f;
#pragma unroll 4
  for (int s = lane >> 3; s < K / 256; s += 4) {
    const int4 x_low = *(const int4 *)(codes + s * 256 + 64 * pair + 16 * half);
    const int4 x_high = *(const int4 *)(codes + s * 256 + 64 * pair + 32 + 16 * half);
    const float dx_low = dx[s * 8 + 2 * pair], dx_high = dx[s * 8 + 2 * pair + 1];
    const float sx_low = sx[s * 8 + 2 * pair], sx_high = sx[s * 8 + 2 * pair + 1];
    const uint8_t *block = row_start + s * 144;
    const uint4 head = __ldg((const uint4 *)block);
    const uint4 q = __ldg((const uint4 *)(block + 16 + 16 * chunk));
    int dot_low = __dp4a((int)(q.x & 0x0F0F0F0Fu), x_low.x, 0);
    dot_low = __dp4a((int)(q.y & 0x0F0F0F0Fu), x_low.y, dot_low);
    dot_low = __dp4a((int)(q.z & 0x0F0F0F0Fu), x_low.z, dot_low);
    dot_low = __dp4a((int)(q.w & 0x0F0F0F0Fu), x_low.w, dot_low);
    int dot_high = __dp4a((int)((q.x >> 4) & 0x0F0F0F0Fu), x_high.x, 0);
    dot_high = __dp4a((int)((q.y >> 4) & 0x0F0F0F0Fu), x_high.y, dot_high);
    dot_high = __dp4a((int)((q.z >> 4) & 0x0F0F0F0Fu), x_high.z, dot_high);
    dot_high = __dp4a((int)((q.w >> 4) & 0x0F0F0F0Fu), x_high.w, dot_high);
    const float d = half_to_float((unsigned short)(head.x & 0xFFFFu));
    const float dmin = half_to_float((unsigned short)(head.x >> 16));
    float sc_low, m_low, sc_high, m_high;
    scale_min(head.y, head.z, head.w, 2 * pair, sc_low, m_low);
    scale_min(head.y, head.z, head.w, 2 * pair + 1, sc_high, m_high);
    float part = d * (sc_low * dx_low * (float)dot_low + sc_high * dx_high * (float)dot_high);
    if (half == 0) part -= dmin * (m_low * sx_low + m_high * sx_high);    // once a sub-block pair
    acc += part;
  }
  store_row(acc, out, row, lane);
}

// q8_0_split: a row's K int8 codes, then its K / 32 float16 scales. A lane reads 16 codes (half a
// block) and its block's scale; a warp 512 codes a step.
template <int MODE>
__device__ __forceinline__ void q8s(const uint8_t *__restrict__ weight, const unsigned short *__restrict__ x,
                                    unsigned short *__restrict__ out, int N, int K, long long row_bytes) {
  const int row = warp_row();
  const auto [codes, dx, sx] = begin_block<MODE, false>(weight, x, N, K, row_bytes, row);
  if (row >= N) return;
  const int lane = threadIdx.x & 31;
  const uint8_t *row_start = weight + row * row_bytes;
  float acc = 0.f;
#pragma unroll 1
  for (int at = lane * 16; at < K; at += 512) {
    const int4 xw = *(const int4 *)(codes + at);
    const int4 q = __ldg((const int4 *)(row_start + at));
    const float d = half_to_float(__ldg((const unsigned short *)(row_start + K) + at / 32));
    int dot = __dp4a(q.x, xw.x, 0);
    dot = __dp4a(q.y, xw.y, dot);
    dot = __dp4a(q.z, xw.z, dot);
    dot = __dp4a(q.w, xw.w, dot);
    acc += d * dx[at / 32] * (float)dot;
  }
  store_row(acc, out, row, lane);
}

// q6_k_split's four codes 4c .. 4c + 3 (c = 0..3) of a 16-value group as bytes 0..63: the group's low
// nibbles are its first 8 low-plane bytes (l0: bytes 0-3, l1: 4-7; values 0-7 in their low nibbles,
// 8-15 in their high ones), its top 2 bits byte i of its high-plane word h at bits 2c. Returns the
// group's sum of (code - 32) * x code (0xE0 is -32 as a signed byte).
__device__ __forceinline__ int q6_group_dot(unsigned l0, unsigned l1, unsigned h, int4 xw) {
  const int c0 = (int)((l0 & 0x0F0F0F0Fu) | ((h & 0x03030303u) << 4));
  const int c1 = (int)((l1 & 0x0F0F0F0Fu) | (((h >> 2) & 0x03030303u) << 4));
  const int c2 = (int)(((l0 >> 4) & 0x0F0F0F0Fu) | (((h >> 4) & 0x03030303u) << 4));
  const int c3 = (int)(((l1 >> 4) & 0x0F0F0F0Fu) | (((h >> 6) & 0x03030303u) << 4));
  const int minus32 = (int)0xE0E0E0E0u;
  int dot = __dp4a(c0, xw.x, 0);
  dot = __dp4a(c1, xw.y, dot);
  dot = __dp4a(c2, xw.z, dot);
  dot = __dp4a(c3, xw.w, dot);
  dot = __dp4a(minus32, xw.x, dot);
  dot = __dp4a(minus32, xw.y, dot);
  dot = __dp4a(minus32, xw.z, dot);
  return __dp4a(minus32, xw.w, dot);
}

// q6_k_split: a row's K / 2 bytes of low nibbles, K / 4 of high bits, K / 16 int8 group scales, K / 256
// float16 d. A lane takes two 16-value groups (16 + 8 bytes of codes) a step, a warp 1,024 values. The
// first step's codes are read before the wait for x (no kernel before writes them), so that their
// latency passes while x is rounded.
template <int MODE>
__device__ __forceinline__ void q6s(const uint8_t *__restrict__ weight, const unsigned short *__restrict__ x,
                                    unsigned short *__restrict__ out, int N, int K, long long row_bytes) {
  const int row = warp_row(), lane = threadIdx.x & 31, first = lane * 32;
  const uint8_t *low = weight + row * row_bytes, *high = low + K / 2;
  const signed char *scales = (const signed char *)(high + K / 4);
  const unsigned short *d = (const unsigned short *)(scales + K / 16);
  uint4 l_first = make_uint4(0, 0, 0, 0);
  uint2 h_first = make_uint2(0, 0);
  if (row < N && first < K) {
    l_first = __ldg((const uint4 *)(low + first / 2));
    h_first = __ldg((const uint2 *)(high + first / 4));
  }
  const auto [codes, dx, sx] = begin_block<MODE, true>(weight, x, N, K, row_bytes, row);
  if (row >= N) return;
  float acc = 0.f;
  for (int at = first; at < K; at += 32 * 32) {
    const uint4 l = at == first ? l_first : __ldg((const uint4 *)(low + at / 2));
    const uint2 h = at == first ? h_first : __ldg((const uint2 *)(high + at / 4));
    const int dot_a = q6_group_dot(l.x, l.y, h.x, *(const int4 *)(codes + at));
    const int dot_b = q6_group_dot(l.z, l.w, h.y, *(const int4 *)(codes + at + 16));
    const float s_a = (float)__ldg(scales + at / 16), s_b = (float)__ldg(scales + at / 16 + 1);
    acc += half_to_float(__ldg(d + at / 256)) * dx[at / 32] * (s_a * (float)dot_a + s_b * (float)dot_b);
  }
  store_row(acc, out, row, lane);
}

// q4_0 and q4_1: 32-value blocks of 18 bytes (a float16 d, 16 bytes of nibbles: values 0-15 low, 16-31
// high) and of 20 (d, a float16 m, the nibbles). Eight blocks make a unit of 256 values, 144 or 160
// bytes, which starts 16-byte aligned (K a multiple of 256). A lane takes a whole unit a step (9 or 10
// vector loads), so that every block's fields sit at offsets known when compiling: in q4_0 an even
// block starts a word, its nibbles 2 bytes into one (a funnel shift of two words); an odd block's
// nibbles start a word. ROW_LANES lanes take a row, so a warp takes 32 / ROW_LANES rows and rounding x
// is shared by that many more. x is rounded PADDED: the lanes of a row read the same offset of 16
// different units at once. A warp's rows past N still run (clamped to the last row, unstored): the
// sum over a row's lanes shuffles across the whole warp.
#define ROW_LANES 16

template <int MODE, bool WITH_MIN>
__device__ __forceinline__ void q4_blocks(const uint8_t *__restrict__ weight, const unsigned short *__restrict__ x,
                                          unsigned short *__restrict__ out, int N, int K, long long row_bytes) {
  constexpr int CHUNKS = WITH_MIN ? 10 : 9;                // 16-byte loads a unit
  const int lane = threadIdx.x & 31, sub = lane % ROW_LANES;
  const int row = warp_row() * (32 / ROW_LANES) + lane / ROW_LANES;
  const auto [codes, dx, sx] = begin_block<MODE, true, true>(weight, x, N, K, row_bytes, row);
  const uint8_t *row_start = weight + (long long)(row < N ? row : N - 1) * row_bytes;
  float acc = 0.f;
  for (int u = sub; u < K / 256; u += ROW_LANES) {
    const uint4 *unit = (const uint4 *)(row_start + u * 16 * CHUNKS);
    unsigned w[4 * CHUNKS];
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
      const uint4 v = __ldg(unit + c);
      w[4 * c] = v.x; w[4 * c + 1] = v.y; w[4 * c + 2] = v.z; w[4 * c + 3] = v.w;
    }
#pragma unroll
    for (int b = 0; b < 8; b++) {
      unsigned q[4], head;                                  // the nibbles' words; d (and m) in `head`
      if (WITH_MIN) {
        head = w[5 * b];
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = w[5 * b + 1 + i];
      } else if (b % 2 == 0) {
        head = w[9 * (b / 2)];
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = __funnelshift_r(w[9 * (b / 2) + i], w[9 * (b / 2) + i + 1], 16);
      } else {
        head = w[9 * (b / 2) + 4] >> 16;
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = w[9 * (b / 2) + 5 + i];
      }
      const int at = padded_code(u * 256 + 32 * b), g = padded_group(u * 8 + b);
      const int4 x_low = *(const int4 *)(codes + at), x_high = *(const int4 *)(codes + at + 16);
      int dot = __dp4a((int)(q[0] & 0x0F0F0F0Fu), x_low.x, 0);
      dot = __dp4a((int)(q[1] & 0x0F0F0F0Fu), x_low.y, dot);
      dot = __dp4a((int)(q[2] & 0x0F0F0F0Fu), x_low.z, dot);
      dot = __dp4a((int)(q[3] & 0x0F0F0F0Fu), x_low.w, dot);
      dot = __dp4a((int)((q[0] >> 4) & 0x0F0F0F0Fu), x_high.x, dot);
      dot = __dp4a((int)((q[1] >> 4) & 0x0F0F0F0Fu), x_high.y, dot);
      dot = __dp4a((int)((q[2] >> 4) & 0x0F0F0F0Fu), x_high.z, dot);
      dot = __dp4a((int)((q[3] >> 4) & 0x0F0F0F0Fu), x_high.w, dot);
      const float d = half_to_float((unsigned short)(head & 0xFFFFu));
      if (WITH_MIN)          // W = d q + m: sum d q x + m x
        acc += d * dx[g] * (float)dot + half_to_float((unsigned short)(head >> 16)) * sx[g];
      else                   // W = d (q - 8): sum d q x - 8 d x
        acc += d * (dx[g] * (float)dot - 8.f * sx[g]);
    }
  }
  store_row<ROW_LANES>(acc, out, row, lane, row < N);
}

template <int MODE>
__device__ __forceinline__ void q40(const uint8_t *__restrict__ weight, const unsigned short *__restrict__ x,
                                    unsigned short *__restrict__ out, int N, int K, long long row_bytes) {
  q4_blocks<MODE, false>(weight, x, out, N, K, row_bytes);
}

template <int MODE>
__device__ __forceinline__ void q41(const uint8_t *__restrict__ weight, const unsigned short *__restrict__ x,
                                    unsigned short *__restrict__ out, int N, int K, long long row_bytes) {
  q4_blocks<MODE, true>(weight, x, out, N, K, row_bytes);
}

// Entry points FORMAT_gemv_MODE; grid: ceil(N / 8) blocks of 256 threads (ceil(N / 16) for q4_0 and
// q4_1, two rows a warp), K + K / 4 bytes of dynamic shared memory (q4_0 and q4_1, padded: K + K / 16 +
// K / 4 + K / 32).
#define ENTRY_BOUNDED(FORMAT, MODE, BOUNDS) \
  extern "C" __global__ void BOUNDS FORMAT##_gemv_##MODE(const uint8_t *__restrict__ w, \
      const unsigned short *__restrict__ x, unsigned short *__restrict__ out, int N, int K, long long row_bytes) { \
    FORMAT<MODE>(w, x, out, N, K, row_bytes); }
#define ENTRY(FORMAT, MODE) ENTRY_BOUNDED(FORMAT, MODE, __launch_bounds__(WARPS * 32))
ENTRY(q4k, 0)
ENTRY(q4k, 1)
ENTRY(q4k, 2)
ENTRY(q4k, 3)
ENTRY(q8s, 0)
ENTRY(q8s, 1)
ENTRY(q8s, 2)
ENTRY(q8s, 3)
ENTRY(q6s, 0)
ENTRY(q6s, 1)
ENTRY(q6s, 2)
ENTRY(q6s, 3)
// q4_0 and q4_1 hold a unit's words at once: at least 3 blocks an SM leaves them registers for it (75
// for q4_1), where the compiler's own choice spills.
#define ENTRY_3_AN_SM(FORMAT, MODE) ENTRY_BOUNDED(FORMAT, MODE, __launch_bounds__(WARPS * 32, 3))
ENTRY_3_AN_SM(q40, 0)
ENTRY_3_AN_SM(q40, 1)
ENTRY_3_AN_SM(q40, 2)
ENTRY_3_AN_SM(q40, 3)
ENTRY_3_AN_SM(q41, 0)
ENTRY_3_AN_SM(q41, 1)
ENTRY_3_AN_SM(q41, 2)
ENTRY_3_AN_SM(q41, 3)
