// Random numbers from Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011), a counter-based generator: block t of a stream is a pure
// function of (key, counter), so any thread computes any block, and a launch's numbers do not
// depend on its grid. Counter words 0-1 are a 64-bit block number (the node's offset plus the
// block index), words 2-3 the stream (the op's seed2), the key the op's seed; random.py keeps
// the offset per node and advances it past the blocks each run used. This is the stream of
// tensorweave.kernels.random (its docstring is the specification): the CPU's NumPy kernels and
// OpenCL's random.cl compute the same values, uniforms bit for bit, normals to float rounding.
//
// Each 128-bit block gives 4 float32 values or 2 float64 values:
//   uniform   float32: the top 24 bits of a word times 2^-24; float64: 53 bits times 2^-53 (in [0, 1))
//   normal    Box-Muller on pairs of uniforms (the first in (0, 1], so its log is finite)
//   truncated normal: normal values with |z| <= 2 kept in order, from the blocks
//             offset + round * blocks + t, round = 0, 1, ... < TW_TRUNC_ROUNDS (the offset
//             advances by blocks * TW_TRUNC_ROUNDS); a thread fills its own outputs only.
//   uniform integers: minval + (bits mod range), 32 bits per int32 and 64 per int64 (the
//             slight modulo bias of TF's kernels for ranges that do not divide 2^32 / 2^64)
#include "common.cuh"

#ifndef TW_TRUNC_ROUNDS  // catalog.TRUNC_ROUNDS, which random.py advances the offset by
#error "compile with -DTW_TRUNC_ROUNDS=<rounds> (catalog.RANDOM_DEFINES)"
#endif

struct TwPhilox {
    unsigned v[4];
};

__device__ __forceinline__ void tw_mulhilo(unsigned a, unsigned b, unsigned& hi, unsigned& lo) {
    const unsigned long long p = (unsigned long long)a * b;
    hi = (unsigned)(p >> 32);
    lo = (unsigned)p;
}

// Block `block` of stream `stream` under `key`.
__device__ __forceinline__ TwPhilox tw_philox(unsigned long long key, unsigned long long stream,
                                              unsigned long long block) {
    unsigned c0 = (unsigned)block, c1 = (unsigned)(block >> 32);
    unsigned c2 = (unsigned)stream, c3 = (unsigned)(stream >> 32);
    unsigned k0 = (unsigned)key, k1 = (unsigned)(key >> 32);
    for (int r = 0; r < 10; ++r) {
        if (r) {  // the Weyl sequence of round keys
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        unsigned hi0, lo0, hi1, lo1;
        tw_mulhilo(0xD2511F53u, c0, hi0, lo0);
        tw_mulhilo(0xCD9E8D57u, c2, hi1, lo1);
        const unsigned n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    TwPhilox out = {{c0, c1, c2, c3}};
    return out;
}

// Uniform values: [0, 1) and (0, 1].
__device__ __forceinline__ float tw_unit_f32(unsigned u) { return (float)(u >> 8) * 5.9604644775390625e-8f; }
__device__ __forceinline__ float tw_unit_open0_f32(unsigned u) {
    return (float)((u >> 8) + 1) * 5.9604644775390625e-8f;
}
__device__ __forceinline__ double tw_unit_f64(unsigned a, unsigned b) {
    return (double)((((unsigned long long)a << 32) | b) >> 11) * 1.1102230246251565e-16;
}
__device__ __forceinline__ double tw_unit_open0_f64(unsigned a, unsigned b) {
    return (double)(((((unsigned long long)a << 32) | b) >> 11) + 1) * 1.1102230246251565e-16;
}

template <typename T>
__device__ __forceinline__ void tw_box_muller(T u1, T u2, T& z0, T& z1) {
    const T r = tw_sqrt((T)-2 * tw_log(u1));
    const T theta = (T)6.283185307179586476925 * u2;
    z0 = r * tw_cos(theta);
    z1 = r * tw_sin(theta);
}

// PER values of the dtype from one block.
template <typename T> struct TwDraw;
template <> struct TwDraw<float> {
    enum { PER = 4 };
    __device__ static void uniform(const TwPhilox& p, float* v) {
        for (int k = 0; k < 4; ++k) v[k] = tw_unit_f32(p.v[k]);
    }
    __device__ static void normal(const TwPhilox& p, float* v) {
        tw_box_muller(tw_unit_open0_f32(p.v[0]), tw_unit_f32(p.v[1]), v[0], v[1]);
        tw_box_muller(tw_unit_open0_f32(p.v[2]), tw_unit_f32(p.v[3]), v[2], v[3]);
    }
};
template <> struct TwDraw<double> {
    enum { PER = 2 };
    __device__ static void uniform(const TwPhilox& p, double* v) {
        v[0] = tw_unit_f64(p.v[0], p.v[1]);
        v[1] = tw_unit_f64(p.v[2], p.v[3]);
    }
    __device__ static void normal(const TwPhilox& p, double* v) {
        tw_box_muller(tw_unit_open0_f64(p.v[0], p.v[1]), tw_unit_f64(p.v[2], p.v[3]), v[0], v[1]);
    }
};

template <typename T, bool NORMAL>
__device__ void tw_random_float(T* __restrict__ out, long long n, unsigned long long key, unsigned long long stream,
                                unsigned long long offset) {
    const int per = TwDraw<T>::PER;
    const long long blocks = (n + per - 1) / per;
    TW_GRID_LOOP(t, blocks) {
        const TwPhilox p = tw_philox(key, stream, offset + (unsigned long long)t);
        T v[4];
        if (NORMAL) {
            TwDraw<T>::normal(p, v);
        } else {
            TwDraw<T>::uniform(p, v);
        }
        for (int k = 0; k < per; ++k) {
            const long long i = t * per + k;
            if (i < n) out[i] = v[k];
        }
    }
}

template <typename T>
__device__ void tw_random_truncated(T* __restrict__ out, long long n, unsigned long long key,
                                    unsigned long long stream, unsigned long long offset) {
    const int per = TwDraw<T>::PER;
    const long long blocks = (n + per - 1) / per;
    TW_GRID_LOOP(t, blocks) {
        int filled = 0;
        for (int round = 0; round < TW_TRUNC_ROUNDS && filled < per; ++round) {
            T v[4];
            TwDraw<T>::normal(tw_philox(key, stream, offset + (unsigned long long)round * blocks + t), v);
            for (int k = 0; k < per && filled < per; ++k) {
                if (tw_fabs(v[k]) <= (T)2) {
                    const long long i = t * per + filled;
                    if (i < n) out[i] = v[k];
                    ++filled;
                }
            }
        }
        // 16 rounds (the catalog's count) give 64 (float32) or 32 (float64) draws for 4 or 2
        // values, each kept with probability 0.954: running out has probability below 1e-35.
        // Zero is in range.
        for (; filled < per; ++filled) {
            const long long i = t * per + filled;
            if (i < n) out[i] = (T)0;
        }
    }
}

__device__ void tw_random_int32(int* __restrict__ out, long long n, unsigned long long key, unsigned long long stream,
                                unsigned long long offset, long long lo, unsigned long long range) {
    const long long blocks = (n + 3) / 4;
    TW_GRID_LOOP(t, blocks) {
        const TwPhilox p = tw_philox(key, stream, offset + (unsigned long long)t);
        for (int k = 0; k < 4; ++k) {
            const long long i = t * 4 + k;
            if (i < n) out[i] = (int)(lo + (long long)(p.v[k] % range));
        }
    }
}

__device__ void tw_random_int64(tw_i64* __restrict__ out, long long n, unsigned long long key,
                                unsigned long long stream, unsigned long long offset, long long lo,
                                unsigned long long range) {
    const long long blocks = (n + 1) / 2;
    TW_GRID_LOOP(t, blocks) {
        const TwPhilox p = tw_philox(key, stream, offset + (unsigned long long)t);
        for (int k = 0; k < 2; ++k) {
            const long long i = t * 2 + k;
            const unsigned long long bits = ((unsigned long long)p.v[2 * k] << 32) | p.v[2 * k + 1];
            // unsigned arithmetic: lo + bits % range may pass through values beyond int64
            if (i < n) out[i] = (tw_i64)((unsigned long long)lo + bits % range);
        }
    }
}

#define TW_RANDOM_FLOAT(SS, ST)                                                                              \
    extern "C" __global__ void tw_random_uniform_##SS(ST* __restrict__ out, long long n, long long key,      \
                                                      long long stream, long long offset) {                  \
        tw_random_float<ST, false>(out, n, key, stream, offset);                                             \
    }                                                                                                        \
    extern "C" __global__ void tw_random_normal_##SS(ST* __restrict__ out, long long n, long long key,       \
                                                     long long stream, long long offset) {                   \
        tw_random_float<ST, true>(out, n, key, stream, offset);                                              \
    }                                                                                                        \
    extern "C" __global__ void tw_random_truncated_normal_##SS(ST* __restrict__ out, long long n,            \
                                                               long long key, long long stream,              \
                                                               long long offset) {                           \
        tw_random_truncated<ST>(out, n, key, stream, offset);                                                \
    }

TW_RANDOM_FLOAT(f32, float)
TW_RANDOM_FLOAT(f64, double)

extern "C" __global__ void tw_random_uniform_int_i32(int* __restrict__ out, long long n, long long key,
                                                     long long stream, long long offset, long long lo,
                                                     long long range) {
    tw_random_int32(out, n, key, stream, offset, lo, (unsigned long long)range);
}
extern "C" __global__ void tw_random_uniform_int_i64(tw_i64* __restrict__ out, long long n, long long key,
                                                     long long stream, long long offset, long long lo,
                                                     long long range) {
    tw_random_int64(out, n, key, stream, offset, lo, (unsigned long long)range);
}
