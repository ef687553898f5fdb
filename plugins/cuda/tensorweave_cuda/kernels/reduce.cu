// Reductions (sum, prod, max, min) for one numeric dtype (TW_T, TW_SUFFIX, TW_KIND as in
// elementwise.cu). plan.py turns any set of axes into passes over a [outer, r, inner] view:
//   rows (inner == 1): a block per (row, part) reduces a contiguous chunk of a row in shared
//                      memory; a long row with few rows is split and a second pass adds parts;
//   cols (inner > 1):  a thread per output walks r with stride inner (coalesced across threads).
// Accumulation is in the element type (integers wrap, as in TF). The last pass of a Mean
// passes scale = 1/count; other passes pass 1.
#include "common.cuh"

typedef TW_T T;

#define TW_REDUCERS(X)                                 \
    X(sum, (T)0, a + b)                                \
    X(prod, (T)1, a * b)                               \
    X(max, TwLimits<T>::lowest(), tw_max(a, b))        \
    X(min, TwLimits<T>::highest(), tw_min(a, b))

#define TW_REDUCE_ROWS(name, ident, expr)                                                              \
    extern "C" __global__ void TW_FN(TW_CAT(reduce_, name), rows)(                                      \
        const T* __restrict__ x, T* __restrict__ out, long long outer, long long r, long long chunk,   \
        long long parts, double scale) {                                                               \
        __shared__ T sh[TW_MAX_BLOCK];                                                                 \
        const long long total = outer * parts;                                                         \
        for (long long blk = blockIdx.x; blk < total; blk += gridDim.x) {                              \
            const long long row = blk / parts, start = (blk % parts) * chunk;                          \
            const long long end = start + chunk < r ? start + chunk : r;                               \
            const T* xr = x + row * r;                                                                 \
            T acc = ident;                                                                             \
            for (long long j = start + threadIdx.x; j < end; j += blockDim.x) {                        \
                const T a = acc, b = xr[j];                                                            \
                acc = (expr);                                                                          \
            }                                                                                          \
            sh[threadIdx.x] = acc;                                                                     \
            __syncthreads();                                                                           \
            for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {                                        \
                if (threadIdx.x < s) {                                                                 \
                    const T a = sh[threadIdx.x], b = sh[threadIdx.x + s];                              \
                    sh[threadIdx.x] = (expr);                                                          \
                }                                                                                      \
                __syncthreads();                                                                       \
            }                                                                                          \
            if (threadIdx.x == 0) out[blk] = tw_scale(sh[0], scale);                                   \
            __syncthreads();                                                                           \
        }                                                                                              \
    }

#define TW_REDUCE_COLS(name, ident, expr)                                                              \
    extern "C" __global__ void TW_FN(TW_CAT(reduce_, name), cols)(                                      \
        const T* __restrict__ x, T* __restrict__ out, long long outer, long long r, long long inner,   \
        double scale) {                                                                                \
        TW_GRID_LOOP(k, outer * inner) {                                                               \
            const T* p = x + (k / inner) * r * inner + (k % inner);                                    \
            T acc = ident;                                                                             \
            for (long long j = 0; j < r; ++j) {                                                        \
                const T a = acc, b = p[j * inner];                                                     \
                acc = (expr);                                                                          \
            }                                                                                          \
            out[k] = tw_scale(acc, scale);                                                             \
        }                                                                                              \
    }

TW_REDUCERS(TW_REDUCE_ROWS)
TW_REDUCERS(TW_REDUCE_COLS)
