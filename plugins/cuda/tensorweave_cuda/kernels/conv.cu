// The data movement of Conv2D and its gradients; the products are cuBLAS GEMMs (conv.py).
//   im2col: the [n * oh * ow, kh * kw * c] matrix of input windows (zeros where a window
//           reaches into the padding), rows in (b, oy, ox) order, columns in (ky, kx, ch)
//           order: the row-major layout of an HWIO filter's [kh * kw * c, co] view.
//   col2im: the adjoint, as a gather: each input element sums, in a fixed order, the
//           window entries it was copied to, so results are deterministic (no atomics).
//   accumulate: acc += part, for filter gradients computed in batch chunks.
// Images are NHWC or NCHW (spatial.cuh); the cols matrix is the same for both.
#include "common.cuh"
#include "spatial.cuh"

#define TW_CONV_PARAMS                                                                                  \
    long long n, long long h, long long w, long long c, long long kh, long long kw, long long sh,       \
        long long sw, long long dh, long long dw, long long pt, long long pl, long long oh, long long ow, \
        int nchw
#define TW_CONV_ARGS n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, nchw

template <typename T>
__device__ void tw_im2col(const T* __restrict__ x, T* __restrict__ cols, TW_CONV_PARAMS) {
    const TwImage img = {n, h, w, c, nchw};
    const long long total = n * oh * ow * kh * kw * c;
    TW_GRID_LOOP(i, total) {
        long long r = i;
        const long long ch = r % c;
        r /= c;
        const long long kx = r % kw;
        r /= kw;
        const long long ky = r % kh;
        r /= kh;
        const long long ox = r % ow;
        r /= ow;
        const long long oy = r % oh;
        const long long b = r / oh;
        const long long y = oy * sh + ky * dh - pt, xx = ox * sw + kx * dw - pl;
        cols[i] = (y >= 0 && y < h && xx >= 0 && xx < w) ? x[tw_image_offset(img, b, y, xx, ch)] : (T)0;
    }
}

// Input element (y, x) sits at window tap (ky, kx) of output (oy, ox) when
// oy * sh + ky * dh == y + pt (likewise for x); taps are summed in (ky, kx) order.
template <typename T>
__device__ void tw_col2im(const T* __restrict__ cols, T* __restrict__ dx, TW_CONV_PARAMS) {
    const TwImage img = {n, h, w, c, nchw};
    const long long total = n * h * w * c;
    const long long row = kh * kw * c;
    TW_GRID_LOOP(i, total) {
        long long b, y, x, ch;
        tw_image_index(img, i, b, y, x, ch);
        const long long py = y + pt, px = x + pl;
        T acc = 0;
        for (long long ky = 0; ky < kh; ++ky) {
            const long long ty = py - ky * dh;
            if (ty < 0) break;
            if (ty % sh) continue;
            const long long oy = ty / sh;
            if (oy >= oh) continue;
            for (long long kx = 0; kx < kw; ++kx) {
                const long long tx = px - kx * dw;
                if (tx < 0) break;
                if (tx % sw) continue;
                const long long ox = tx / sw;
                if (ox >= ow) continue;
                acc += cols[((b * oh + oy) * ow + ox) * row + (ky * kw + kx) * c + ch];
            }
        }
        dx[i] = acc;
    }
}

template <typename T>
__device__ void tw_accumulate(T* __restrict__ acc, const T* __restrict__ part, long long n) {
    TW_GRID_LOOP(i, n) { acc[i] += part[i]; }
}

#define TW_CONV_ALL(SS, ST)                                                                               \
    extern "C" __global__ void tw_im2col_##SS(const ST* __restrict__ x, ST* __restrict__ cols,            \
                                              TW_CONV_PARAMS) {                                           \
        tw_im2col<ST>(x, cols, TW_CONV_ARGS);                                                             \
    }                                                                                                     \
    extern "C" __global__ void tw_col2im_##SS(const ST* __restrict__ cols, ST* __restrict__ dx,           \
                                              TW_CONV_PARAMS) {                                           \
        tw_col2im<ST>(cols, dx, TW_CONV_ARGS);                                                            \
    }                                                                                                     \
    extern "C" __global__ void tw_accumulate_##SS(ST* __restrict__ acc, const ST* __restrict__ part,      \
                                                  long long n) {                                          \
        tw_accumulate<ST>(acc, part, n);                                                                  \
    }

TW_CONV_ALL(f32, float)
TW_CONV_ALL(f64, double)
