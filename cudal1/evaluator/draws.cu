// The timed calls' random inputs, drawn on the device from a counter the device advances itself
// (cudal1/evaluator/device_draws.py). Philox4x32-10 (Salmon et al., SC'11) keyed by the batch's seed;
// each block of values has the counter (block index, draw index, call counter), so every call, draw and
// value gets its own part of the stream. Distributions as torch's factories give them: randn (Box-Muller),
// rand in [0, 1) with the dtype's own resolution, randint in [low, high).
//
// No torch headers: compiled by nvcc into a fatbin that the worker loads through the driver API.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

enum Kind { NORMAL = 0, UNIFORM = 1, INTEGER = 2 };
enum Dtype { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I64 = 4, I32 = 5, I16 = 6, I8 = 7, U8 = 8 };

struct Block { uint32_t v[4]; };

__device__ __forceinline__ Block philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  Block b = {{c0, c1, c2, c3}};
  return b;
}

// [0, 1) on a grid of 2^-bits, every value exactly representable in the target dtype
__device__ __forceinline__ float unit(uint32_t u, int bits) { return (float)(u >> (32 - bits)) * ldexpf(1.0f, -bits); }

__device__ __forceinline__ double unit53(uint32_t a, uint32_t b) {
  return ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) * (1.0 / 9007199254740992.0);
}

template <typename T>
__device__ __forceinline__ void put(void* out, long long i, T value, int dtype) {
  switch (dtype) {
    case F32: static_cast<float*>(out)[i] = (float)value; break;
    case F16: static_cast<__half*>(out)[i] = __float2half_rn((float)value); break;
    case BF16: static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn((float)value); break;
    case F64: static_cast<double*>(out)[i] = (double)value; break;
    case I64: static_cast<long long*>(out)[i] = (long long)value; break;
    case I32: static_cast<int32_t*>(out)[i] = (int32_t)value; break;
    case I16: static_cast<int16_t*>(out)[i] = (int16_t)value; break;
    case I8: static_cast<int8_t*>(out)[i] = (int8_t)value; break;
    case U8: static_cast<uint8_t*>(out)[i] = (uint8_t)value; break;
  }
}

// The values one Philox block gives: two Box-Muller pairs (both outputs of each), four uniforms on a 32-bit
// word each, or two float64 or integer values on two words each. One value per block, as this kernel drew
// before, spent 2.8x torch's normal_ on 64M float32 values (docs/gpu-runs.md at 88f971b, 2026-12-02-batch-profile).
__device__ __forceinline__ int per_block(int kind, int dtype) { return (dtype == F64 || kind == INTEGER) ? 2 : 4; }

template <typename T>
__device__ __forceinline__ void put_all(void* out, long long i, long long n, const T* v, int count, int dtype) {
  for (int k = 0; k < count && i + k < n; ++k) put(out, i + k, v[k], dtype);
}

// key[0]: the batch's seed; key[1]: the call counter (advanced by cudal1_begin before a call's draws).
// Block g of a draw holds its values g * per .. g * per + per - 1; its counter is (g, draw index, call).
extern "C" __global__ void cudal1_draw(void* out, long long n, int kind, int dtype, long long low, long long high,
                                       const unsigned long long* key, int draw) {
  const unsigned long long seed = key[0], call = key[1];
  const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32) ^ (uint32_t)(call >> 32);
  const int per = per_block(kind, dtype);
  const long long blocks = (n + per - 1) / per;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < blocks; g += stride) {
    const Block r = philox((uint32_t)g, (uint32_t)(g >> 32), (uint32_t)draw, (uint32_t)call, k0, k1);
    const long long i = g * per;
    if (kind == INTEGER) {
      const unsigned long long range = (unsigned long long)(high - low);
      long long v[2];
      for (int k = 0; k < 2; ++k) {
        const unsigned long long u = ((unsigned long long)r.v[2 * k] << 32) | r.v[2 * k + 1];
        v[k] = low + (long long)(u % range);
      }
      if (dtype == F32 || dtype == F16 || dtype == BF16 || dtype == F64) {
        const double d[2] = {(double)v[0], (double)v[1]};
        put_all(out, i, n, d, 2, dtype);
      } else {
        put_all(out, i, n, v, 2, dtype);
      }
    } else if (dtype == F64) {
      double v[2];
      if (kind == NORMAL) {
        const double u1 = 1.0 - unit53(r.v[0], r.v[1]), u2 = unit53(r.v[2], r.v[3]);  // u1 in (0, 1]
        const double radius = sqrt(-2.0 * log(u1));
        double s, c;
        sincospi(2.0 * u2, &s, &c);
        v[0] = radius * c;
        v[1] = radius * s;
      } else {
        v[0] = unit53(r.v[0], r.v[1]);
        v[1] = unit53(r.v[2], r.v[3]);
      }
      put_all(out, i, n, v, 2, dtype);
    } else {
      float v[4];
      if (kind == NORMAL) {
        for (int k = 0; k < 2; ++k) {
          const float u1 = 1.0f - unit(r.v[2 * k], 24), u2 = unit(r.v[2 * k + 1], 24);  // u1 in (0, 1]
          const float radius = sqrtf(-2.0f * logf(u1));
          float s, c;
          sincospif(2.0f * u2, &s, &c);
          v[2 * k] = radius * c;
          v[2 * k + 1] = radius * s;
        }
      } else {
        const int bits = dtype == F16 ? 11 : (dtype == BF16 ? 8 : 24);
        for (int k = 0; k < 4; ++k) v[k] = unit(r.v[k], bits);
      }
      if (dtype == F32 && i + 3 < n && ((uintptr_t)out & 15) == 0) {
        reinterpret_cast<float4*>(out)[g] = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        put_all(out, i, n, v, 4, dtype);
      }
    }
  }
}

// A call's first node: the call counter advanced (the draws after it read the new value), and the previous
// call's output copied into its staging row (fingerprints.Fingerprints): the host writes {source, destination,
// bytes} into pinned memory instead of launching a copy. Zero bytes: nothing to copy (the host writes the
// slot before every replay).
extern "C" __global__ void cudal1_begin(const unsigned long long* slot, unsigned long long* key) {
  if (blockIdx.x == 0 && threadIdx.x == 0) key[1] += 1;
  const unsigned long long src = slot[0], dst = slot[1], bytes = slot[2];
  if (bytes == 0) return;
  const unsigned long long start = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  if (((src | dst | bytes) & 15) == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (unsigned long long i = start; i < bytes / 16; i += stride) d[i] = s[i];
  } else if (((src | dst | bytes) & 3) == 0) {
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    for (unsigned long long i = start; i < bytes / 4; i += stride) d[i] = s[i];
  } else {
    const unsigned char* s = reinterpret_cast<const unsigned char*>(src);
    unsigned char* d = reinterpret_cast<unsigned char*>(dst);
    for (unsigned long long i = start; i < bytes; i += stride) d[i] = s[i];
  }
}

template <typename T>
__device__ __forceinline__ double load(const void* x, long long i) { return (double)static_cast<const T*>(x)[i]; }

// A staged batch's fingerprint sums in one pass (fingerprints.Fingerprints): per row (call) r and element e,
// sum x, sum |x|, sum x*w, sum x^2 in float64, w = P[e] * A[offset_r + (e / stride) % size], the weights the
// torch path builds as a tensor (Fingerprints._weights). Block (chunk, row) writes its four partial sums;
// the caller adds the chunks. Deterministic: a fixed order for fixed shapes.
extern "C" __global__ void cudal1_sums(const void* x, int dtype, long long n, const signed char* p, const signed char* a,
                                       const long long* offsets, long long stride, long long size, double* partials) {
  __shared__ double acc[4][256];
  const long long row = blockIdx.y;
  const long long base = row * n, shift = offsets[row];
  double s = 0, l1 = 0, ws = 0, sq = 0;
  // (e / stride) % size carried from one grid step to the next: a 64-bit division and modulo per element
  // cost a quarter of this kernel's device time on large outputs (docs/gpu-runs.md at 88f971b, 2026-12-02-batch-profile)
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x, step = (long long)gridDim.x * blockDim.x;
  const long long step_r = step % stride, step_q = (step / stride) % size;
  long long r = first % stride, q = (first / stride) % size;  // e % stride, (e / stride) % size
  for (long long e = first; e < n; e += step) {
    double v;
    switch (dtype) {
      case F16: v = (double)__half2float(static_cast<const __half*>(x)[base + e]); break;
      case BF16: v = (double)__bfloat162float(static_cast<const __nv_bfloat16*>(x)[base + e]); break;
      case F64: v = load<double>(x, base + e); break;
      default: v = load<float>(x, base + e); break;
    }
    const double w = (double)(p[e] * a[shift + q]);
    s += v;
    l1 += fabs(v);
    ws += v * w;
    sq += v * v;
    r += step_r;
    q += step_q;
    if (r >= stride) {
      r -= stride;
      q += 1;
    }
    if (q >= size) q -= size;  // q < size and step_q < size before the step: one wrap at most
  }
  const int t = threadIdx.x;
  acc[0][t] = s; acc[1][t] = l1; acc[2][t] = ws; acc[3][t] = sq;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) {
      for (int k = 0; k < 4; ++k) acc[k][t] += acc[k][t + half];
    }
    __syncthreads();
  }
  if (t < 4) partials[(row * gridDim.x + blockIdx.x) * 4 + t] = acc[t][0];
}
