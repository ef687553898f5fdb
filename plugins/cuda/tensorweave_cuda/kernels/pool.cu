// MaxPool, AvgPool and their gradients, with the CPU kernels' semantics and summation
// order (so float results match them closely, usually exactly):
//   MaxPool: NaN-propagating max of the window's elements inside the input (SAME padding
//     never wins: it reads as the dtype's lowest value, as on the CPU).
//   AvgPool: the sum of the window's elements inside the input, column sums first (the
//     CPU's two separable passes), divided by how many there are.
//   Gradients are gathers, a thread per input element summing the windows that cover it in
//   window-tap order, so they are deterministic without atomics. MaxPoolGrad gives each
//   output's gradient to the first element of its window (row-major, padding included)
//   equal to orig_output, re-finding it per covering window: the CPU's tie rule.
// Images are NHWC or NCHW (spatial.cuh).
#include "common.cuh"
#include "spatial.cuh"

#define TW_POOL_PARAMS                                                                                       \
    long long n, long long h, long long w, long long c, long long kh, long long kw, long long sh,            \
        long long sw, long long pt, long long pl, long long oh, long long ow, int nchw
#define TW_POOL_ARGS n, h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, nchw

template <typename T>
__device__ void tw_max_pool(const T* __restrict__ x, T* __restrict__ y, TW_POOL_PARAMS) {
    const TwImage in = {n, h, w, c, nchw}, out = {n, oh, ow, c, nchw};
    const long long total = n * oh * ow * c;
    TW_GRID_LOOP(i, total) {
        long long b, oy, ox, ch;
        tw_image_index(out, i, b, oy, ox, ch);
        T m = TwLimits<T>::lowest();
        for (long long ky = 0; ky < kh; ++ky) {
            const long long yy = oy * sh + ky - pt;
            if (yy < 0 || yy >= h) continue;
            for (long long kx = 0; kx < kw; ++kx) {
                const long long xx = ox * sw + kx - pl;
                if (xx < 0 || xx >= w) continue;
                m = tw_max(m, x[tw_image_offset(in, b, yy, xx, ch)]);
            }
        }
        y[i] = m;
    }
}

// Elements of the window starting at `start` (may be negative) inside [0, size).
__device__ __forceinline__ long long tw_covered(long long start, long long k, long long size) {
    const long long lo = start > 0 ? start : 0, hi = start + k < size ? start + k : size;
    return hi - lo;
}

template <typename T>
__device__ void tw_avg_pool(const T* __restrict__ x, T* __restrict__ y, TW_POOL_PARAMS) {
    const TwImage in = {n, h, w, c, nchw}, out = {n, oh, ow, c, nchw};
    const long long total = n * oh * ow * c;
    TW_GRID_LOOP(i, total) {
        long long b, oy, ox, ch;
        tw_image_index(out, i, b, oy, ox, ch);
        T acc = 0;
        for (long long kx = 0; kx < kw; ++kx) {
            const long long xx = ox * sw + kx - pl;
            if (xx < 0 || xx >= w) continue;
            T col = 0;
            for (long long ky = 0; ky < kh; ++ky) {
                const long long yy = oy * sh + ky - pt;
                if (yy < 0 || yy >= h) continue;
                col += x[tw_image_offset(in, b, yy, xx, ch)];
            }
            acc += col;
        }
        const long long count = tw_covered(oy * sh - pt, kh, h) * tw_covered(ox * sw - pl, kw, w);
        y[i] = acc / (T)count;
    }
}

// Calls visit(oy, ox, ky, kx) for each window (oy, ox) that covers the element at padded
// coordinates (py, px), at its tap (ky, kx), in tap order.
template <typename F>
__device__ __forceinline__ void tw_covering_windows(long long py, long long px, long long kh, long long kw,
                                                    long long sh, long long sw, long long oh, long long ow,
                                                    F visit) {
    for (long long ky = 0; ky < kh; ++ky) {
        const long long ty = py - ky;
        if (ty < 0) break;
        if (ty % sh) continue;
        const long long oy = ty / sh;
        if (oy >= oh) continue;
        for (long long kx = 0; kx < kw; ++kx) {
            const long long tx = px - kx;
            if (tx < 0) break;
            if (tx % sw) continue;
            const long long ox = tx / sw;
            if (ox >= ow) continue;
            visit(oy, ox, ky, kx);
        }
    }
}

template <typename T>
__device__ void tw_max_pool_grad(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ g,
                                 T* __restrict__ dx, TW_POOL_PARAMS) {
    const TwImage in = {n, h, w, c, nchw}, out = {n, oh, ow, c, nchw};
    const long long total = n * h * w * c;
    TW_GRID_LOOP(i, total) {
        long long b, yy, xx, ch;
        tw_image_index(in, i, b, yy, xx, ch);
        T acc = 0;
        tw_covering_windows(yy + pt, xx + pl, kh, kw, sh, sw, oh, ow, [&](long long oy, long long ox, long long ky,
                                                                         long long kx) {
            const long long o = tw_image_offset(out, b, oy, ox, ch);
            const T target = y[o];
            long long first = -1;  // the window's first tap holding orig_output
            for (long long a = 0; a < kh && first < 0; ++a) {
                const long long ya = oy * sh + a - pt;
                for (long long e = 0; e < kw; ++e) {
                    const long long xe = ox * sw + e - pl;
                    const T v = (ya >= 0 && ya < h && xe >= 0 && xe < w) ? x[tw_image_offset(in, b, ya, xe, ch)]
                                                                         : TwLimits<T>::lowest();
                    if (v == target) {
                        first = a * kw + e;
                        break;
                    }
                }
            }
            if (first == ky * kw + kx) acc += g[o];
        });
        dx[i] = acc;
    }
}

template <typename T>
__device__ void tw_avg_pool_grad(const T* __restrict__ g, T* __restrict__ dx, TW_POOL_PARAMS) {
    const TwImage in = {n, h, w, c, nchw}, out = {n, oh, ow, c, nchw};
    const long long total = n * h * w * c;
    TW_GRID_LOOP(i, total) {
        long long b, yy, xx, ch;
        tw_image_index(in, i, b, yy, xx, ch);
        T acc = 0;
        tw_covering_windows(yy + pt, xx + pl, kh, kw, sh, sw, oh, ow, [&](long long oy, long long ox, long long,
                                                                         long long) {
            const long long count = tw_covered(oy * sh - pt, kh, h) * tw_covered(ox * sw - pl, kw, w);
            acc += g[tw_image_offset(out, b, oy, ox, ch)] / (T)count;
        });
        dx[i] = acc;
    }
}

#define TW_POOL_FORWARD(SS, ST)                                                                            \
    extern "C" __global__ void tw_max_pool_##SS(const ST* __restrict__ x, ST* __restrict__ y,              \
                                                TW_POOL_PARAMS) {                                          \
        tw_max_pool<ST>(x, y, TW_POOL_ARGS);                                                               \
    }
#define TW_POOL_FLOAT(SS, ST)                                                                              \
    extern "C" __global__ void tw_avg_pool_##SS(const ST* __restrict__ x, ST* __restrict__ y,              \
                                                TW_POOL_PARAMS) {                                          \
        tw_avg_pool<ST>(x, y, TW_POOL_ARGS);                                                               \
    }                                                                                                      \
    extern "C" __global__ void tw_max_pool_grad_##SS(const ST* __restrict__ x, const ST* __restrict__ y,   \
                                                     const ST* __restrict__ g, ST* __restrict__ dx,        \
                                                     TW_POOL_PARAMS) {                                     \
        tw_max_pool_grad<ST>(x, y, g, dx, TW_POOL_ARGS);                                                   \
    }                                                                                                      \
    extern "C" __global__ void tw_avg_pool_grad_##SS(const ST* __restrict__ g, ST* __restrict__ dx,        \
                                                     TW_POOL_PARAMS) {                                     \
        tw_avg_pool_grad<ST>(g, dx, TW_POOL_ARGS);                                                         \
    }

TW_POOL_FORWARD(f32, float)
TW_POOL_FORWARD(f64, double)
TW_POOL_FORWARD(i32, int)
TW_POOL_FORWARD(i64, tw_i64)
TW_POOL_FLOAT(f32, float)
TW_POOL_FLOAT(f64, double)
