// Depthwise convolution and its two backprops, direct (one work item per element computed).
// The geometry table g is spatial.py's (the same layout as spatial.cl's): CO = C * M output
// channels, output channel k * M + q from input channel k and filter [:, :, k, q].
#define N   g[0]
#define H   g[1]
#define W   g[2]
#define C   g[3]
#define OH  g[4]
#define OW  g[5]
#define KH  g[6]
#define KW  g[7]
#define SH  g[8]
#define SW  g[9]
#define DH  g[10]
#define DW  g[11]
#define PT  g[12]
#define PL  g[13]
#define CO  g[14]
#define XS(n, h, w, c) ((n) * g[15] + (h) * g[16] + (w) * g[17] + (c) * g[18])
#define YS(n, h, w, c) ((n) * g[19] + (h) * g[20] + (w) * g[21] + (c) * g[22])
// The filter is [KH, KW, C, M], contiguous.
#define FS(i, j, k, q, M) ((((i) * KW + (j)) * C + (k)) * (M) + (q))
#define SPLIT4(idx, a1, a2, a3, v0, v1, v2, v3) \
    int v3 = idx % (a3); int v2 = (idx / (a3)) % (a2); int v1 = (idx / ((a3) * (a2))) % (a1); \
    int v0 = idx / ((a3) * (a2) * (a1));

__kernel void depthwise(__global T* y, __global const T* x, __global const T* f, const int n_out,
                        __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_out) return;
    SPLIT4(idx, OH, OW, CO, n, oh, ow, co)
    const int M = CO / C, k = co / M, q = co % M;
    T acc = 0;
    for (int i = 0; i < KH; ++i) {
        int ih = oh * SH - PT + i * DH;
        if (ih < 0 || ih >= H) continue;
        for (int j = 0; j < KW; ++j) {
            int iw = ow * SW - PL + j * DW;
            if (iw < 0 || iw >= W) continue;
            acc += x[XS(n, ih, iw, k)] * f[FS(i, j, k, q, M)];
        }
    }
    y[YS(n, oh, ow, co)] = acc;
}

__kernel void depthwise_backprop_input(__global T* dx, __global const T* f, __global const T* dy, const int n_in,
                                       __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_in) return;
    SPLIT4(idx, H, W, C, n, ih, iw, c)
    const int M = CO / C;
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
            for (int q = 0; q < M; ++q)
                acc += dy[YS(n, oh, ow, c * M + q)] * f[FS(i, j, c, q, M)];
        }
    }
    dx[XS(n, ih, iw, c)] = acc;
}

__kernel void depthwise_backprop_filter(__global T* df, __global const T* x, __global const T* dy, const int n_f,
                                        __global const int* g)
{
    int idx = get_global_id(0);
    if (idx >= n_f) return;
    const int M = CO / C;
    SPLIT4(idx, KW, C, M, i, j, k, q)
    T acc = 0;
    for (int n = 0; n < N; ++n)
        for (int oh = 0; oh < OH; ++oh) {
            int ih = oh * SH - PT + i * DH;
            if (ih < 0 || ih >= H) continue;
            for (int ow = 0; ow < OW; ++ow) {
                int iw = ow * SW - PL + j * DW;
                if (iw < 0 || iw >= W) continue;
                acc += x[XS(n, ih, iw, k)] * dy[YS(n, oh, ow, k * M + q)];
            }
        }
    df[idx] = acc;
}
