// Batch normalization (FusedBatchNorm*) and local response normalization (LRN, LRNGrad),
// with the CPU kernels' formulas:
//   bn_stats:      a thread per channel: mean, biased variance (two passes), the
//                  Bessel-corrected variance, and the reserve spaces (mean, biased variance)
//   bn_apply:      y = (x - mean) * (scale / sqrt(var + eps)) + offset, a thread per element
//   bn_grad_sums:  a thread per channel: sum(dy) (offset gradient), sum(dy * (x - mean)) and
//                  that times 1 / sqrt(var + eps) (scale gradient)
//   bn_grad_dx:    a thread per element: the input gradient (training or inference)
//   lrn, lrn_grad: a thread per element, the channel window looped
// Scalars (eps, bessel, bias, alpha, beta, count) arrive as double and are cast to T.
// A 4-D tensor is read as rows x c: row r, channel ch sits at r * c + ch (NHWC) or, with
// nchw, at ((r / hw) * c + ch) * hw + r % hw (NCHW, hw = height * width).
#include "common.cuh"

__device__ __forceinline__ long long tw_bn_offset(long long r, long long ch, long long c, long long hw, int nchw) {
    return nchw ? ((r / hw) * c + ch) * hw + r % hw : r * c + ch;
}

__device__ __forceinline__ long long tw_bn_channel(long long i, long long c, long long hw, int nchw) {
    return nchw ? (i / hw) % c : i % c;
}

template <typename T>
__device__ void tw_bn_stats(const T* __restrict__ x, T* __restrict__ mean, T* __restrict__ batch_var,
                            T* __restrict__ r1, T* __restrict__ r2, long long c, long long rows, long long hw,
                            int nchw, T bessel) {
    TW_GRID_LOOP(ch, c) {
        T s = 0;
        for (long long r = 0; r < rows; ++r) s += x[tw_bn_offset(r, ch, c, hw, nchw)];
        const T m = rows ? s / (T)rows : TwLimits<T>::nan();
        T v = 0;
        for (long long r = 0; r < rows; ++r) {
            const T d = x[tw_bn_offset(r, ch, c, hw, nchw)] - m;
            v += d * d;
        }
        v = rows ? v / (T)rows : TwLimits<T>::nan();
        mean[ch] = m;
        r1[ch] = m;
        r2[ch] = v;
        batch_var[ch] = v * bessel;
    }
}

template <typename T>
__device__ void tw_bn_apply(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ offset,
                            const T* __restrict__ mean, const T* __restrict__ var, T* __restrict__ y, T eps,
                            long long n, long long c, long long hw, int nchw) {
    TW_GRID_LOOP(i, n) {
        const long long ch = tw_bn_channel(i, c, hw, nchw);
        const T inv = (T)1 / sqrt(var[ch] + eps);
        y[i] = (x[i] - mean[ch]) * (inv * scale[ch]) + offset[ch];
    }
}

template <typename T>
__device__ void tw_bn_grad_sums(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ mean,
                                const T* __restrict__ var, T* __restrict__ doffset, T* __restrict__ dscale,
                                T* __restrict__ dy_xc, T eps, long long c, long long rows, long long hw, int nchw) {
    TW_GRID_LOOP(ch, c) {
        const T m = mean[ch];
        T s = 0, sx = 0;
        for (long long r = 0; r < rows; ++r) {
            const long long o = tw_bn_offset(r, ch, c, hw, nchw);
            s += dy[o];
            sx += dy[o] * (x[o] - m);
        }
        doffset[ch] = s;
        dy_xc[ch] = sx;
        dscale[ch] = sx / sqrt(var[ch] + eps);
    }
}

template <typename T>
__device__ void tw_bn_grad_dx(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                              const T* __restrict__ mean, const T* __restrict__ var, const T* __restrict__ dy_sum,
                              const T* __restrict__ dy_xc, T* __restrict__ dx, T eps, long long n, long long c,
                              long long hw, int nchw, int training, T count) {
    TW_GRID_LOOP(i, n) {
        const long long ch = tw_bn_channel(i, c, hw, nchw);
        const T inv = (T)1 / sqrt(var[ch] + eps);
        if (training)
            dx[i] = scale[ch] * inv *
                    (dy[i] - dy_sum[ch] / count - (x[i] - mean[ch]) * (dy_xc[ch] * inv * inv / count));
        else
            dx[i] = dy[i] * (scale[ch] * inv);
    }
}

// N = bias + alpha * (sum of squares of channels [ch - r, ch + r] of a row)
template <typename T>
__device__ __forceinline__ T tw_lrn_norm(const T* row, long long ch, long long c, long long r, T bias, T alpha) {
    const long long lo = ch - r > 0 ? ch - r : 0, hi = ch + r < c - 1 ? ch + r : c - 1;
    T s = 0;
    for (long long d = lo; d <= hi; ++d) s += row[d] * row[d];
    return bias + alpha * s;
}

template <typename T>
__device__ void tw_lrn(const T* __restrict__ x, T* __restrict__ y, long long n, long long c, long long r, T bias,
                       T alpha, T beta) {
    TW_GRID_LOOP(i, n) {
        const long long ch = i % c;
        y[i] = x[i] * pow(tw_lrn_norm(x + (i - ch), ch, c, r, bias, alpha), -beta);
    }
}

// dx_c = g_c N_c^-beta - 2 alpha beta x_c sum_{j in window(c)} g_j y_j / N_j
template <typename T>
__device__ void tw_lrn_grad(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ y,
                            T* __restrict__ dx, long long n, long long c, long long r, T bias, T alpha, T beta) {
    TW_GRID_LOOP(i, n) {
        const long long ch = i % c, base = i - ch;
        const long long lo = ch - r > 0 ? ch - r : 0, hi = ch + r < c - 1 ? ch + r : c - 1;
        T acc = 0;
        for (long long j = lo; j <= hi; ++j)
            acc += g[base + j] * y[base + j] / tw_lrn_norm(x + base, j, c, r, bias, alpha);
        dx[i] = g[i] * pow(tw_lrn_norm(x + base, ch, c, r, bias, alpha), -beta) - (T)2 * alpha * beta * x[i] * acc;
    }
}

#define TW_NORM_ALL(SS, ST)                                                                                           \
    extern "C" __global__ void tw_bn_stats_##SS(const ST* x, ST* mean, ST* batch_var, ST* r1, ST* r2,                 \
                                                long long c, long long rows, long long hw, int nchw, double bessel) { \
        tw_bn_stats<ST>(x, mean, batch_var, r1, r2, c, rows, hw, nchw, (ST)bessel);                                   \
    }                                                                                                                 \
    extern "C" __global__ void tw_bn_apply_##SS(const ST* x, const ST* scale, const ST* offset, const ST* mean,       \
                                                const ST* var, ST* y, double eps, long long n, long long c,           \
                                                long long hw, int nchw) {                                             \
        tw_bn_apply<ST>(x, scale, offset, mean, var, y, (ST)eps, n, c, hw, nchw);                                     \
    }                                                                                                                 \
    extern "C" __global__ void tw_bn_grad_sums_##SS(const ST* dy, const ST* x, const ST* mean, const ST* var,         \
                                                    ST* doffset, ST* dscale, ST* dy_xc, double eps, long long c,      \
                                                    long long rows, long long hw, int nchw) {                         \
        tw_bn_grad_sums<ST>(dy, x, mean, var, doffset, dscale, dy_xc, (ST)eps, c, rows, hw, nchw);                    \
    }                                                                                                                 \
    extern "C" __global__ void tw_bn_grad_dx_##SS(const ST* dy, const ST* x, const ST* scale, const ST* mean,         \
                                                  const ST* var, const ST* dy_sum, const ST* dy_xc, ST* dx,           \
                                                  double eps, long long n, long long c, long long hw, int nchw,       \
                                                  int training, double count) {                                       \
        tw_bn_grad_dx<ST>(dy, x, scale, mean, var, dy_sum, dy_xc, dx, (ST)eps, n, c, hw, nchw, training, (ST)count);  \
    }                                                                                                                 \
    extern "C" __global__ void tw_lrn_##SS(const ST* x, ST* y, long long n, long long c, long long r, double bias,    \
                                           double alpha, double beta) {                                               \
        tw_lrn<ST>(x, y, n, c, r, (ST)bias, (ST)alpha, (ST)beta);                                                     \
    }                                                                                                                 \
    extern "C" __global__ void tw_lrn_grad_##SS(const ST* g, const ST* x, const ST* y, ST* dx, long long n,           \
                                                long long c, long long r, double bias, double alpha, double beta) {   \
        tw_lrn_grad<ST>(g, x, y, dx, n, c, r, (ST)bias, (ST)alpha, (ST)beta);                                         \
    }

TW_NORM_ALL(f32, float)
TW_NORM_ALL(f64, double)
