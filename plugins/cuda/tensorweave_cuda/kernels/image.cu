// Image resizing, NHWC, a thread per element computed. The sampling tables are the core's
// (tensorweave.ops.image_ops.resize_table), uploaded once per shape as one int32 table t
// (float32 weights stored as their bit patterns, read through a float view):
//   bilinear:      ly[oh], uy[oh], fy[oh], lx[ow], ux[ow], fx[ow]
//   nearest:       iy[oh], ix[ow]
//   bilinear grad: nnzy, nnzx, offy[h + 1], oy[nnzy], wy[nnzy], offx[w + 1], ox[nnzx], wx[nnzx]
//   nearest grad:  nnzy, nnzx, offy[h + 1], oy[nnzy], offx[w + 1], ox[nnzx]
// The gradients are gathers (each input pixel sums the outputs that read it): deterministic,
// no atomics. Bilinear blends in float, along the width first, as the CPU kernel.
#include "common.cuh"

#define TW_RESIZE_PARAMS long long n, long long c, long long h, long long w, long long oh, long long ow

__device__ __forceinline__ float tw_table_float(const int* t, long long i) {
    return reinterpret_cast<const float*>(t)[i];
}

template <typename T>
__device__ void tw_resize_bilinear(const T* __restrict__ x, float* __restrict__ y, const int* __restrict__ t,
                                   TW_RESIZE_PARAMS) {
    TW_GRID_LOOP(i, n) {
        const long long ch = i % c, ox = (i / c) % ow, oy = (i / (c * ow)) % oh, b = i / (c * ow * oh);
        const long long ly = t[oy], uy = t[oh + oy], lx = t[3 * oh + ox], ux = t[3 * oh + ow + ox];
        const float fy = tw_table_float(t, 2 * oh + oy), fx = tw_table_float(t, 3 * oh + 2 * ow + ox);
        const long long top = (b * h + ly) * w, bot = (b * h + uy) * w;
        const float tl = (float)x[(top + lx) * c + ch], tr = (float)x[(top + ux) * c + ch];
        const float bl = (float)x[(bot + lx) * c + ch], br = (float)x[(bot + ux) * c + ch];
        const float tt = tl + (tr - tl) * fx, bb = bl + (br - bl) * fx;
        y[i] = tt + (bb - tt) * fy;
    }
}

template <typename T>
__device__ void tw_resize_nearest(const T* __restrict__ x, T* __restrict__ y, const int* __restrict__ t,
                                  TW_RESIZE_PARAMS) {
    TW_GRID_LOOP(i, n) {
        const long long ch = i % c, ox = (i / c) % ow, oy = (i / (c * ow)) % oh, b = i / (c * ow * oh);
        y[i] = x[((b * h + t[oy]) * w + t[oh + ox]) * c + ch];
    }
}

template <typename T>
__device__ void tw_resize_bilinear_grad(const float* __restrict__ g, T* __restrict__ dx, const int* __restrict__ t,
                                        TW_RESIZE_PARAMS) {
    const long long nnzy = t[0], nnzx = t[1];
    const int* offy = t + 2;
    const long long p_oy = 2 + h + 1, p_wy = p_oy + nnzy, p_offx = p_wy + nnzy;
    const int* offx = t + p_offx;
    const long long p_ox = p_offx + w + 1, p_wx = p_ox + nnzx;
    TW_GRID_LOOP(i, n) {
        const long long ch = i % c, xx = (i / c) % w, yy = (i / (c * w)) % h, b = i / (c * w * h);
        T acc = 0;
        for (long long a = offy[yy]; a < offy[yy + 1]; ++a) {
            const long long row = (b * oh + t[p_oy + a]) * ow;
            T s = 0;
            for (long long e = offx[xx]; e < offx[xx + 1]; ++e)
                s += (T)tw_table_float(t, p_wx + e) * (T)g[(row + t[p_ox + e]) * c + ch];
            acc += (T)tw_table_float(t, p_wy + a) * s;
        }
        dx[i] = acc;
    }
}

template <typename T, typename A>
__device__ void tw_resize_nearest_grad(const T* __restrict__ g, T* __restrict__ dx, const int* __restrict__ t,
                                       TW_RESIZE_PARAMS) {
    const long long nnzy = t[0];
    const int* offy = t + 2;
    const long long p_oy = 2 + h + 1, p_offx = p_oy + nnzy;
    const int* offx = t + p_offx;
    const long long p_ox = p_offx + w + 1;
    TW_GRID_LOOP(i, n) {
        const long long ch = i % c, xx = (i / c) % w, yy = (i / (c * w)) % h, b = i / (c * w * h);
        A acc = 0;
        for (long long a = offy[yy]; a < offy[yy + 1]; ++a) {
            const long long row = (b * oh + t[p_oy + a]) * ow;
            for (long long e = offx[xx]; e < offx[xx + 1]; ++e) acc += (A)g[(row + t[p_ox + e]) * c + ch];
        }
        dx[i] = (T)acc;
    }
}

#define TW_RESIZE_FORWARD(SS, ST)                                                                              \
    extern "C" __global__ void tw_resize_bilinear_##SS(const ST* __restrict__ x, float* __restrict__ y,        \
                                                       const int* __restrict__ t, TW_RESIZE_PARAMS) {          \
        tw_resize_bilinear<ST>(x, y, t, n, c, h, w, oh, ow);                                                   \
    }                                                                                                          \
    extern "C" __global__ void tw_resize_nearest_##SS(const ST* __restrict__ x, ST* __restrict__ y,            \
                                                      const int* __restrict__ t, TW_RESIZE_PARAMS) {           \
        tw_resize_nearest<ST>(x, y, t, n, c, h, w, oh, ow);                                                    \
    }
#define TW_RESIZE_NEAREST_GRAD(SS, ST, ACC)                                                                    \
    extern "C" __global__ void tw_resize_nearest_grad_##SS(const ST* __restrict__ g, ST* __restrict__ dx,      \
                                                           const int* __restrict__ t, TW_RESIZE_PARAMS) {      \
        tw_resize_nearest_grad<ST, ACC>(g, dx, t, n, c, h, w, oh, ow);                                         \
    }
#define TW_RESIZE_BILINEAR_GRAD(SS, ST)                                                                        \
    extern "C" __global__ void tw_resize_bilinear_grad_##SS(const float* __restrict__ g, ST* __restrict__ dx,  \
                                                            const int* __restrict__ t, TW_RESIZE_PARAMS) {     \
        tw_resize_bilinear_grad<ST>(g, dx, t, n, c, h, w, oh, ow);                                             \
    }

TW_RESIZE_FORWARD(f32, float)
TW_RESIZE_FORWARD(f64, double)
TW_RESIZE_FORWARD(i32, int)
TW_RESIZE_FORWARD(i64, tw_i64)
TW_RESIZE_BILINEAR_GRAD(f32, float)
TW_RESIZE_BILINEAR_GRAD(f64, double)
TW_RESIZE_NEAREST_GRAD(f32, float, float)
TW_RESIZE_NEAREST_GRAD(f64, double, double)
TW_RESIZE_NEAREST_GRAD(i32, int, long long)
