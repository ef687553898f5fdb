// Image resizing, NHWC, one work item per element computed. The sampling tables are the
// core's (tensorweave.ops.image_ops), built on the host per shape and handed over as one
// int32 table t (float32 weights as their bit patterns). Defines: T the image type; ACC the
// gradients' accumulator type.
//   bilinear:      ly[OH], uy[OH], fy[OH], lx[OW], ux[OW], fx[OW]
//   nearest:       iy[OH], ix[OW]
//   bilinear grad: nnzy, nnzx, offy[H + 1], oy[nnzy], wy[nnzy], offx[W + 1], ox[nnzx], wx[nnzx]
//   nearest grad:  nnzy, nnzx, offy[H + 1], oy[nnzy], offx[W + 1], ox[nnzx]
// (the gradients' gather form: the output rows/columns that read each input row/column).
#ifndef ACC
#define ACC float
#endif

__kernel void resize_bilinear(__global float* y, __global const T* x, const int n, const int C, const int OH,
                              const int OW, const int H, const int W, __global const int* t)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int c = i % C, ox = (i / C) % OW, oy = (i / (C * OW)) % OH, b = i / (C * OW * OH);
    const int ly = t[oy], uy = t[OH + oy];
    const float fy = as_float(t[2 * OH + oy]);
    __global const int* tx = t + 3 * OH;
    const int lx = tx[ox], ux = tx[OW + ox];
    const float fx = as_float(tx[2 * OW + ox]);
    const long top = ((long)b * H + ly) * W, bot = ((long)b * H + uy) * W;
    const float tl = (float)x[(top + lx) * C + c], tr = (float)x[(top + ux) * C + c];
    const float bl = (float)x[(bot + lx) * C + c], br = (float)x[(bot + ux) * C + c];
    const float tt = tl + (tr - tl) * fx, bb = bl + (br - bl) * fx;
    y[i] = tt + (bb - tt) * fy;
}

__kernel void resize_bilinear_grad(__global T* dx, __global const float* g, const int n, const int C, const int OH,
                                   const int OW, const int H, const int W, __global const int* t)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int c = i % C, x = (i / C) % W, y = (i / (C * W)) % H, b = i / (C * W * H);
    const int nnzy = t[0];
    __global const int* offy = t + 2;
    __global const int* oy = offy + H + 1;
    __global const int* wy = oy + nnzy;
    __global const int* offx = wy + nnzy;
    __global const int* ox = offx + W + 1;
    __global const int* wx = ox + t[1];
    ACC acc = 0;
    for (int a = offy[y]; a < offy[y + 1]; ++a) {
        const long row = ((long)b * OH + oy[a]) * OW;
        ACC s = 0;
        for (int e = offx[x]; e < offx[x + 1]; ++e) s += (ACC)as_float(wx[e]) * (ACC)g[(row + ox[e]) * C + c];
        acc += (ACC)as_float(wy[a]) * s;
    }
    dx[i] = (T)acc;
}

__kernel void resize_nearest(__global T* y, __global const T* x, const int n, const int C, const int OH,
                             const int OW, const int H, const int W, __global const int* t)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int c = i % C, ox = (i / C) % OW, oy = (i / (C * OW)) % OH, b = i / (C * OW * OH);
    y[i] = x[(((long)b * H + t[oy]) * W + t[OH + ox]) * C + c];
}

__kernel void resize_nearest_grad(__global T* dx, __global const T* g, const int n, const int C, const int OH,
                                  const int OW, const int H, const int W, __global const int* t)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int c = i % C, x = (i / C) % W, y = (i / (C * W)) % H, b = i / (C * W * H);
    __global const int* offy = t + 2;
    __global const int* oy = offy + H + 1;
    __global const int* offx = oy + t[0];
    __global const int* ox = offx + W + 1;
    ACC acc = 0;
    for (int a = offy[y]; a < offy[y + 1]; ++a) {
        const long row = ((long)b * OH + oy[a]) * OW;
        for (int e = offx[x]; e < offx[x + 1]; ++e) acc += (ACC)g[(row + ox[e]) * C + c];
    }
    dx[i] = (T)acc;
}
