// DepthwiseConv2dNative and its two backprops, direct: a thread per element computed (the
// gradients are gathers, deterministic without atomics). Output channel k * m + q is input
// channel k through filter [:, :, k, q] (filter [kh, kw, c, m], contiguous). Images are
// NHWC or NCHW (spatial.cuh).
#include "common.cuh"
#include "spatial.cuh"

#define TW_DW_PARAMS                                                                                    \
    long long n, long long h, long long w, long long c, long long kh, long long kw, long long sh,       \
        long long sw, long long dh, long long dw, long long pt, long long pl, long long oh, long long ow, \
        long long m, int nchw
#define TW_DW_ARGS n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, m, nchw

template <typename T>
__device__ void tw_depthwise(const T* __restrict__ x, const T* __restrict__ f, T* __restrict__ y, TW_DW_PARAMS) {
    const TwImage in = {n, h, w, c, nchw}, out = {n, oh, ow, c * m, nchw};
    const long long total = n * oh * ow * c * m;
    TW_GRID_LOOP(i, total) {
        long long b, oy, ox, co;
        tw_image_index(out, i, b, oy, ox, co);
        const long long k = co / m, q = co % m;
        T acc = 0;
        for (long long ky = 0; ky < kh; ++ky) {
            const long long yy = oy * sh + ky * dh - pt;
            if (yy < 0 || yy >= h) continue;
            for (long long kx = 0; kx < kw; ++kx) {
                const long long xx = ox * sw + kx * dw - pl;
                if (xx < 0 || xx >= w) continue;
                acc += x[tw_image_offset(in, b, yy, xx, k)] * f[((ky * kw + kx) * c + k) * m + q];
            }
        }
        y[i] = acc;
    }
}

template <typename T>
__device__ void tw_depthwise_backprop_input(const T* __restrict__ f, const T* __restrict__ dy, T* __restrict__ dx,
                                            TW_DW_PARAMS) {
    const TwImage in = {n, h, w, c, nchw}, out = {n, oh, ow, c * m, nchw};
    const long long total = n * h * w * c;
    TW_GRID_LOOP(i, total) {
        long long b, yy, xx, k;
        tw_image_index(in, i, b, yy, xx, k);
        T acc = 0;
        for (long long ky = 0; ky < kh; ++ky) {
            const long long ty = yy + pt - ky * dh;
            if (ty < 0 || ty % sh) continue;
            const long long oy = ty / sh;
            if (oy >= oh) continue;
            for (long long kx = 0; kx < kw; ++kx) {
                const long long tx = xx + pl - kx * dw;
                if (tx < 0 || tx % sw) continue;
                const long long ox = tx / sw;
                if (ox >= ow) continue;
                for (long long q = 0; q < m; ++q)
                    acc += dy[tw_image_offset(out, b, oy, ox, k * m + q)] * f[((ky * kw + kx) * c + k) * m + q];
            }
        }
        dx[i] = acc;
    }
}

template <typename T>
__device__ void tw_depthwise_backprop_filter(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ df,
                                             TW_DW_PARAMS) {
    const TwImage in = {n, h, w, c, nchw}, out = {n, oh, ow, c * m, nchw};
    const long long total = kh * kw * c * m;
    TW_GRID_LOOP(i, total) {
        const long long q = i % m, k = (i / m) % c, kx = (i / (m * c)) % kw, ky = i / (m * c * kw);
        T acc = 0;
        for (long long b = 0; b < n; ++b)
            for (long long oy = 0; oy < oh; ++oy) {
                const long long yy = oy * sh + ky * dh - pt;
                if (yy < 0 || yy >= h) continue;
                for (long long ox = 0; ox < ow; ++ox) {
                    const long long xx = ox * sw + kx * dw - pl;
                    if (xx < 0 || xx >= w) continue;
                    acc += x[tw_image_offset(in, b, yy, xx, k)] * dy[tw_image_offset(out, b, oy, ox, k * m + q)];
                }
            }
        df[i] = acc;
    }
}

#define TW_DW_ALL(SS, ST)                                                                                      \
    extern "C" __global__ void tw_depthwise_##SS(const ST* __restrict__ x, const ST* __restrict__ f,           \
                                                 ST* __restrict__ y, TW_DW_PARAMS) {                           \
        tw_depthwise<ST>(x, f, y, TW_DW_ARGS);                                                                 \
    }                                                                                                          \
    extern "C" __global__ void tw_depthwise_backprop_input_##SS(const ST* __restrict__ f,                      \
                                                                const ST* __restrict__ dy,                     \
                                                                ST* __restrict__ dx, TW_DW_PARAMS) {           \
        tw_depthwise_backprop_input<ST>(f, dy, dx, TW_DW_ARGS);                                                \
    }                                                                                                          \
    extern "C" __global__ void tw_depthwise_backprop_filter_##SS(const ST* __restrict__ x,                     \
                                                                 const ST* __restrict__ dy,                    \
                                                                 ST* __restrict__ df, TW_DW_PARAMS) {          \
        tw_depthwise_backprop_filter<ST>(x, dy, df, TW_DW_ARGS);                                               \
    }

TW_DW_ALL(f32, float)
TW_DW_ALL(f64, double)
