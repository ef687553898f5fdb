// Batch normalization (FusedBatchNorm*, one work item per channel for the statistics and
// per element for the rest) and local response normalization (LRN, LRNGrad: one work item
// per element, the window over the channels looped). Defines: T element type (float or
// double), also the type of scale/offset/mean/variance.
//
// A 4-D tensor is read as `rows` x C elements: row r, channel c sits at r * C + c (NHWC) or,
// with nchw, at ((r / HW) * C + c) * HW + r % HW (NCHW, HW = height * width).

inline long bn_offset(const long r, const int c, const int C, const int HW, const int nchw)
{
    return nchw ? ((r / HW) * C + c) * (long)HW + r % HW : r * C + c;
}

inline int bn_channel(const long i, const int C, const int HW, const int nchw)
{
    return nchw ? (int)((i / HW) % C) : (int)(i % C);
}

// mean, biased variance (two passes), Bessel-corrected variance; mean and variance are also
// written to the reserve spaces r1, r2. An empty batch gives NaN statistics.
__kernel void bn_stats(__global T* mean, __global T* batch_var, __global T* r1, __global T* r2,
                       __global const T* x, const int C, const int rows, const int HW, const int nchw,
                       const T bessel)
{
    int c = get_global_id(0);
    if (c >= C) return;
    T s = 0;
    for (long r = 0; r < rows; ++r) s += x[bn_offset(r, c, C, HW, nchw)];
    const T m = rows ? s / rows : (T)NAN;
    T v = 0;
    for (long r = 0; r < rows; ++r) {
        const T d = x[bn_offset(r, c, C, HW, nchw)] - m;
        v += d * d;
    }
    v = rows ? v / rows : (T)NAN;
    mean[c] = m;
    r1[c] = m;
    r2[c] = v;
    batch_var[c] = v * bessel;
}

// y = (x - mean) * (scale / sqrt(var + eps)) + offset
__kernel void bn_apply(__global T* y, __global const T* x, __global const T* scale, __global const T* offset,
                       __global const T* mean, __global const T* var, const T eps, const int n, const int C,
                       const int HW, const int nchw)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int c = bn_channel(i, C, HW, nchw);
    const T inv = (T)1 / sqrt(var[c] + eps);
    y[i] = (x[i] - mean[c]) * (inv * scale[c]) + offset[c];
}

// Per channel: sum(dy) (the offset gradient) and sum(dy * (x - mean)) * inv (the scale
// gradient); dy_xc keeps the unscaled sum for bn_grad_dx.
__kernel void bn_grad_sums(__global T* doffset, __global T* dscale, __global T* dy_xc, __global const T* dy,
                           __global const T* x, __global const T* mean, __global const T* var, const T eps,
                           const int C, const int rows, const int HW, const int nchw)
{
    int c = get_global_id(0);
    if (c >= C) return;
    const T m = mean[c];
    T s = 0, sx = 0;
    for (long r = 0; r < rows; ++r) {
        const long o = bn_offset(r, c, C, HW, nchw);
        s += dy[o];
        sx += dy[o] * (x[o] - m);
    }
    doffset[c] = s;
    dy_xc[c] = sx;
    dscale[c] = sx / sqrt(var[c] + eps);
}

// training: dx = scale * inv * (dy - sum(dy) / count - (x - mean) * sum(dy * (x - mean)) * inv^2 / count)
// inference: dx = dy * scale * inv
__kernel void bn_grad_dx(__global T* dx, __global const T* dy, __global const T* x, __global const T* scale,
                         __global const T* mean, __global const T* var, __global const T* dy_sum,
                         __global const T* dy_xc, const T eps, const int n, const int C, const int HW,
                         const int nchw, const int training, const T count)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int c = bn_channel(i, C, HW, nchw);
    const T inv = (T)1 / sqrt(var[c] + eps);
    if (training)
        dx[i] = scale[c] * inv * (dy[i] - dy_sum[c] / count - (x[i] - mean[c]) * (dy_xc[c] * inv * inv / count));
    else
        dx[i] = dy[i] * (scale[c] * inv);
}

// ---------------------------------------------------------------------------------------
// LRN over the last (channel) axis: N = bias + alpha * sum of squares over [c - r, c + r].
inline T lrn_norm(__global const T* row, const int c, const int C, const int r, const T bias, const T alpha)
{
    const int lo = c - r > 0 ? c - r : 0, hi = c + r < C - 1 ? c + r : C - 1;
    T s = 0;
    for (int d = lo; d <= hi; ++d) s += row[d] * row[d];
    return bias + alpha * s;
}

__kernel void lrn(__global T* y, __global const T* x, const int n, const int C, const int r, const T bias,
                  const T alpha, const T beta)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int c = i % C;
    __global const T* row = x + (i - c);
    y[i] = x[i] * pow(lrn_norm(row, c, C, r, bias, alpha), -beta);
}

// dx_c = g_c N_c^-beta - 2 alpha beta x_c sum_{j in window(c)} g_j y_j / N_j
__kernel void lrn_grad(__global T* dx, __global const T* g, __global const T* x, __global const T* y, const int n,
                       const int C, const int r, const T bias, const T alpha, const T beta)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int c = i % C;
    const long base = i - c;
    __global const T* row = x + base;
    const int lo = c - r > 0 ? c - r : 0, hi = c + r < C - 1 ? c + r : C - 1;
    T acc = 0;
    for (int j = lo; j <= hi; ++j) acc += g[base + j] * y[base + j] / lrn_norm(row, j, C, r, bias, alpha);
    dx[i] = g[i] * pow(lrn_norm(row, c, C, r, bias, alpha), -beta) - (T)2 * alpha * beta * x[i] * acc;
}
