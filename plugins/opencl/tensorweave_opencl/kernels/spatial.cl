// Convolution and pooling, direct (one work item per output element, no im2col buffer).
// T element type. Geometry and layouts come in a table g (int32):
#define N   g[0]
#define H   g[1]
#define W   g[2]
#define C   g[3]    // input channels
#define OH  g[4]
#define OW  g[5]
#define KH  g[6]
#define KW  g[7]
#define SH  g[8]
#define SW  g[9]
#define DH  g[10]
#define DW  g[11]
#define PT  g[12]   // padding before, top and left
#define PL  g[13]
#define CO  g[14]   // output channels (pooling: C)
// Element strides of the input-shaped tensor (x, dx) and of the output-shaped one (y, dy)
// for the logical dimensions n, h, w, c: NHWC and NCHW are the same kernels.
#define XS(n, h, w, c) ((n) * g[15] + (h) * g[16] + (w) * g[17] + (c) * g[18])
#define YS(n, h, w, c) ((n) * g[19] + (h) * g[20] + (w) * g[21] + (c) * g[22])
// The filter is [KH, KW, C, CO], contiguous.
#define FS(i, j, c, o) ((((i) * KW + (j)) * C + (c)) * CO + (o))

// Splits a logical NHWC index of a tensor with dims (a0, a1, a2, a3).
#define SPLIT4(idx, a1, a2, a3, v0, v1, v2, v3) \
    int v3 = idx % (a3); int v2 = (idx / (a3)) % (a2); int v1 = (idx / ((a3) * (a2))) % (a1); \
    int v0 = idx / ((a3) * (a2) * (a1));

__kernel void conv2d(__global T* y, __global const T* x, __global const T* f, const int n_out,
                     __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_out) return;
    SPLIT4(idx, OH, OW, CO, n, oh, ow, co)
    T acc = 0;
    for (int i = 0; i < KH; ++i) {
        int ih = oh * SH - PT + i * DH;
        if (ih < 0 || ih >= H) continue;
        for (int j = 0; j < KW; ++j) {
            int iw = ow * SW - PL + j * DW;
            if (iw < 0 || iw >= W) continue;
            for (int c = 0; c < C; ++c)
                acc += x[XS(n, ih, iw, c)] * f[FS(i, j, c, co)];
        }
    }
    y[YS(n, oh, ow, co)] = acc;
}

// dx[n, ih, iw, c] = sum over the outputs whose window tap (i, j) lands on (ih, iw).
__kernel void conv2d_backprop_input(__global T* dx, __global const T* f, __global const T* dy, const int n_in,
                                    __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_in) return;
    SPLIT4(idx, H, W, C, n, ih, iw, c)
    T acc = 0;
    for (int i = 0; i < KH; ++i) {
        int th = ih + PT - i * DH;
        if (th < 0 || th % SH) continue;
        int oh = th / SH;
        if (oh >= OH) continue;
        for (int j = 0; j < KW; ++j) {
            int tw = iw + PL - j * DW;
            if (tw < 0 || tw % SW) continue;
            int ow = tw / SW;
            if (ow >= OW) continue;
            for (int o = 0; o < CO; ++o)
                acc += dy[YS(n, oh, ow, o)] * f[FS(i, j, c, o)];
        }
    }
    dx[XS(n, ih, iw, c)] = acc;
}

// df[i, j, c, o] = sum over examples and outputs of x at the tap times dy.
__kernel void conv2d_backprop_filter(__global T* df, __global const T* x, __global const T* dy, const int n_f,
                                     __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_f) return;
    SPLIT4(idx, KW, C, CO, i, j, c, o)
    T acc = 0;
    for (int n = 0; n < N; ++n)
        for (int oh = 0; oh < OH; ++oh) {
            int ih = oh * SH - PT + i * DH;
            if (ih < 0 || ih >= H) continue;
            for (int ow = 0; ow < OW; ++ow) {
                int iw = ow * SW - PL + j * DW;
                if (iw < 0 || iw >= W) continue;
                acc += x[XS(n, ih, iw, c)] * dy[YS(n, oh, ow, o)];
            }
        }
    df[idx] = acc;
}

// Pooling windows: KH x KW taps with strides SH, SW (no dilation); padding is never counted.
__kernel void max_pool(__global T* y, __global const T* x, const int n_out, __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_out) return;
    SPLIT4(idx, OH, OW, C, n, oh, ow, c)
    T m = LOWEST;
    for (int i = 0; i < KH; ++i) {
        int ih = oh * SH - PT + i;
        if (ih < 0 || ih >= H) continue;
        for (int j = 0; j < KW; ++j) {
            int iw = ow * SW - PL + j;
            if (iw < 0 || iw >= W) continue;
            T v = x[XS(n, ih, iw, c)];
            if (v > m || v != v) m = v;   // NaN wins, as np.maximum
        }
    }
    y[YS(n, oh, ow, c)] = m;
}

// MaxPoolGrad, two passes. Each output's gradient goes to the first tap (row-major) of its
// window holding the window's maximum, as TensorFlow's kernel does: first that tap per
// output (an int table shaped like the output), then each input element gathers from the
// windows whose chosen tap it is.
__kernel void max_pool_argmax(__global int* arg, __global const T* x, __global const T* y, const int n_out,
                              __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_out) return;
    SPLIT4(idx, OH, OW, C, n, oh, ow, c)
    const T m = y[YS(n, oh, ow, c)];
    int first = -1;
    for (int a = 0; a < KH && first < 0; ++a) {
        int h2 = oh * SH - PT + a;
        if (h2 < 0 || h2 >= H) continue;
        for (int b = 0; b < KW; ++b) {
            int w2 = ow * SW - PL + b;
            if (w2 < 0 || w2 >= W) continue;
            if (x[XS(n, h2, w2, c)] == m) { first = a * KW + b; break; }
        }
    }
    arg[idx] = first;
}

__kernel void max_pool_grad(__global T* dx, __global const int* arg, __global const T* dy, const int n_in,
                            __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_in) return;
    SPLIT4(idx, H, W, C, n, ih, iw, c)
    T acc = 0;
    for (int i = 0; i < KH; ++i) {
        int th = ih + PT - i;
        if (th < 0 || th % SH) continue;
        int oh = th / SH;
        if (oh >= OH) continue;
        for (int j = 0; j < KW; ++j) {
            int tw = iw + PL - j;
            if (tw < 0 || tw % SW) continue;
            int ow = tw / SW;
            if (ow >= OW) continue;
            if (arg[((n * OH + oh) * OW + ow) * C + c] == i * KW + j) acc += dy[YS(n, oh, ow, c)];
        }
    }
    dx[XS(n, ih, iw, c)] = acc;
}

inline int window_count(int oh, int ow, __global const int* g)
{
    int h0 = max(oh * SH - PT, 0), h1 = min(oh * SH - PT + KH, H);
    int w0 = max(ow * SW - PL, 0), w1 = min(ow * SW - PL + KW, W);
    return max(h1 - h0, 0) * max(w1 - w0, 0);
}

__kernel void avg_pool(__global T* y, __global const T* x, const int n_out, __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_out) return;
    SPLIT4(idx, OH, OW, C, n, oh, ow, c)
    T s = 0;
    for (int i = 0; i < KH; ++i) {
        int ih = oh * SH - PT + i;
        if (ih < 0 || ih >= H) continue;
        for (int j = 0; j < KW; ++j) {
            int iw = ow * SW - PL + j;
            if (iw < 0 || iw >= W) continue;
            s += x[XS(n, ih, iw, c)];
        }
    }
    y[YS(n, oh, ow, c)] = s / (T)window_count(oh, ow, g);
}

__kernel void avg_pool_grad(__global T* dx, __global const T* dy, const int n_in, __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_in) return;
    SPLIT4(idx, H, W, C, n, ih, iw, c)
    T acc = 0;
    for (int i = 0; i < KH; ++i) {
        int th = ih + PT - i;
        if (th < 0 || th % SH) continue;
        int oh = th / SH;
        if (oh >= OH) continue;
        for (int j = 0; j < KW; ++j) {
            int tw = iw + PL - j;
            if (tw < 0 || tw % SW) continue;
            int ow = tw / SW;
            if (ow >= OW) continue;
            acc += dy[YS(n, oh, ow, c)] / (T)window_count(oh, ow, g);
        }
    }
    dx[XS(n, ih, iw, c)] = acc;
}

// Vector variants for CO % 8 == 0: a work item handles 8 output channels at once (V is T's
// 8-wide vector), which CPU devices turn into SIMD, as matmul_blocked does. Channel-last
// tensors load and store 8 channels as one vector; others go element by element.
#define CS_X g[18]
#define CS_Y g[22]
#define LOAD8(p, s) ((s) == 1 ? vload8(0, (p)) : (V)((p)[0], (p)[(s)], (p)[2 * (s)], (p)[3 * (s)], \
                                                     (p)[4 * (s)], (p)[5 * (s)], (p)[6 * (s)], (p)[7 * (s)]))
#define SUM8(v) ((v).s0 + (v).s1 + (v).s2 + (v).s3 + (v).s4 + (v).s5 + (v).s6 + (v).s7)

inline void store8(V v, __global T* p, int s)
{
    if (s == 1) { vstore8(v, 0, p); return; }
    p[0] = v.s0; p[s] = v.s1; p[2 * s] = v.s2; p[3 * s] = v.s3;
    p[4 * s] = v.s4; p[5 * s] = v.s5; p[6 * s] = v.s6; p[7 * s] = v.s7;
}

__kernel void conv2d_vec(__global T* y, __global const T* x, __global const T* f, const int n_out8,
                         __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_out8) return;
    const int CB = CO / 8;
    SPLIT4(idx, OH, OW, CB, n, oh, ow, cb)
    V acc = (V)(0);
    for (int i = 0; i < KH; ++i) {
        int ih = oh * SH - PT + i * DH;
        if (ih < 0 || ih >= H) continue;
        for (int j = 0; j < KW; ++j) {
            int iw = ow * SW - PL + j * DW;
            if (iw < 0 || iw >= W) continue;
            for (int c = 0; c < C; ++c)
                acc += x[XS(n, ih, iw, c)] * vload8(0, f + FS(i, j, c, cb * 8));
        }
    }
    store8(acc, y + YS(n, oh, ow, cb * 8), CS_Y);
}

__kernel void conv2d_backprop_input_vec(__global T* dx, __global const T* f, __global const T* dy, const int n_in,
                                        __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_in) return;
    SPLIT4(idx, H, W, C, n, ih, iw, c)
    V acc = (V)(0);
    for (int i = 0; i < KH; ++i) {
        int th = ih + PT - i * DH;
        if (th < 0 || th % SH) continue;
        int oh = th / SH;
        if (oh >= OH) continue;
        for (int j = 0; j < KW; ++j) {
            int tw = iw + PL - j * DW;
            if (tw < 0 || tw % SW) continue;
            int ow = tw / SW;
            if (ow >= OW) continue;
            for (int o = 0; o < CO; o += 8)
                acc += LOAD8(dy + YS(n, oh, ow, o), CS_Y) * vload8(0, f + FS(i, j, c, o));
        }
    }
    dx[XS(n, ih, iw, c)] = SUM8(acc);
}

__kernel void conv2d_backprop_filter_vec(__global T* df, __global const T* x, __global const T* dy, const int n_f8,
                                         __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_f8) return;
    const int CB = CO / 8;
    SPLIT4(idx, KW, C, CB, i, j, c, cb)
    V acc = (V)(0);
    for (int n = 0; n < N; ++n)
        for (int oh = 0; oh < OH; ++oh) {
            int ih = oh * SH - PT + i * DH;
            if (ih < 0 || ih >= H) continue;
            for (int ow = 0; ow < OW; ++ow) {
                int iw = ow * SW - PL + j * DW;
                if (iw < 0 || iw >= W) continue;
                acc += x[XS(n, ih, iw, c)] * LOAD8(dy + YS(n, oh, ow, cb * 8), CS_Y);
            }
        }
    vstore8(acc, 0, df + FS(i, j, c, cb * 8));
}
