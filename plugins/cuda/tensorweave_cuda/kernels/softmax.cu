// Softmax, LogSoftmax and the softmax cross-entropies over the last axis, a block per row
// (power-of-two blockDim, rows looped when there are more than blocks). Max-shifted as the
// CPU kernels, so exp never overflows. A sparse label outside [0, classes) makes its row's
// loss and gradient NaN: a kernel cannot raise, and TF's GPU kernels do the same.
#include "common.cuh"

template <typename T, bool LOG>
__device__ void tw_softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long rows, long long c, T* sh) {
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * c;
        T* yr = y + row * c;
        T m = TwLimits<T>::lowest();
        for (long long j = threadIdx.x; j < c; j += blockDim.x) m = tw_max(m, xr[j]);
        m = tw_block_reduce(m, sh, TwMaxOp());
        T s = 0;
        for (long long j = threadIdx.x; j < c; j += blockDim.x) s += tw_exp(xr[j] - m);
        s = tw_block_reduce(s, sh, TwSumOp());
        if (LOG) {
            const T ls = tw_log(s);
            for (long long j = threadIdx.x; j < c; j += blockDim.x) yr[j] = (xr[j] - m) - ls;
        } else {
            for (long long j = threadIdx.x; j < c; j += blockDim.x) yr[j] = tw_exp(xr[j] - m) / s;
        }
    }
}

// Dense labels (a distribution per row) when SPARSE is false, else an integer class per row.
template <typename T, typename L, bool SPARSE>
__device__ void tw_xent_rows(const T* __restrict__ x, const L* __restrict__ labels, T* __restrict__ loss,
                             T* __restrict__ backprop, long long rows, long long c, T* sh) {
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * c;
        T* br = backprop + row * c;
        T m = TwLimits<T>::lowest();
        for (long long j = threadIdx.x; j < c; j += blockDim.x) m = tw_max(m, xr[j]);
        m = tw_block_reduce(m, sh, TwMaxOp());
        T s = 0;
        for (long long j = threadIdx.x; j < c; j += blockDim.x) s += tw_exp(xr[j] - m);
        s = tw_block_reduce(s, sh, TwSumOp());
        const T ls = tw_log(s);
        if (SPARSE) {
            const long long label = (long long)labels[row];
            const bool ok = label >= 0 && label < c;
            for (long long j = threadIdx.x; j < c; j += blockDim.x)
                br[j] = ok ? tw_exp(xr[j] - m) / s - (T)(j == label) : TwLimits<T>::nan();
            if (threadIdx.x == 0) loss[row] = ok ? ls - (xr[label] - m) : TwLimits<T>::nan();
        } else {
            const L* lr = labels + row * c;
            T l = 0;
            for (long long j = threadIdx.x; j < c; j += blockDim.x) {
                const T sj = xr[j] - m;
                l += lr[j] * (ls - sj);
                br[j] = tw_exp(sj) / s - lr[j];
            }
            l = tw_block_reduce(l, sh, TwSumOp());
            if (threadIdx.x == 0) loss[row] = l;
        }
    }
}

#define TW_SOFTMAX_ALL(SS, ST)                                                                              \
    extern "C" __global__ void tw_softmax_rows_##SS(const ST* __restrict__ x, ST* __restrict__ y,          \
                                                    long long rows, long long c) {                         \
        __shared__ ST sh[TW_MAX_BLOCK];                                                                    \
        tw_softmax_rows<ST, false>(x, y, rows, c, sh);                                                     \
    }                                                                                                      \
    extern "C" __global__ void tw_log_softmax_rows_##SS(const ST* __restrict__ x, ST* __restrict__ y,      \
                                                        long long rows, long long c) {                     \
        __shared__ ST sh[TW_MAX_BLOCK];                                                                    \
        tw_softmax_rows<ST, true>(x, y, rows, c, sh);                                                      \
    }                                                                                                      \
    extern "C" __global__ void tw_xent_rows_##SS(const ST* __restrict__ x, const ST* __restrict__ labels,  \
                                                 ST* __restrict__ loss, ST* __restrict__ backprop,         \
                                                 long long rows, long long c) {                            \
        __shared__ ST sh[TW_MAX_BLOCK];                                                                    \
        tw_xent_rows<ST, ST, false>(x, labels, loss, backprop, rows, c, sh);                               \
    }                                                                                                      \
    extern "C" __global__ void tw_sparse_xent_rows_##SS##_i32(const ST* __restrict__ x,                    \
                                                              const int* __restrict__ labels,              \
                                                              ST* __restrict__ loss, ST* __restrict__ backprop, \
                                                              long long rows, long long c) {               \
        __shared__ ST sh[TW_MAX_BLOCK];                                                                    \
        tw_xent_rows<ST, int, true>(x, labels, loss, backprop, rows, c, sh);                               \
    }                                                                                                      \
    extern "C" __global__ void tw_sparse_xent_rows_##SS##_i64(const ST* __restrict__ x,                    \
                                                              const tw_i64* __restrict__ labels,           \
                                                              ST* __restrict__ loss, ST* __restrict__ backprop, \
                                                              long long rows, long long c) {               \
        __shared__ ST sh[TW_MAX_BLOCK];                                                                    \
        tw_xent_rows<ST, tw_i64, true>(x, labels, loss, backprop, rows, c, sh);                            \
    }

TW_SOFTMAX_ALL(f32, float)
TW_SOFTMAX_ALL(f64, double)
