// Mirror padding and its gradient. T: element type; SHIFT 0 for REFLECT (the border is not
// repeated), 1 for SYMMETRIC (it is).

#ifndef SHIFT
#define SHIFT 0
#endif

// MirrorPad: out[i] = x[src(i)], dimension by dimension: padded position p of a dimension of
// size d with `before` padding reads i = p - before when inside, else its mirror image.
// meta = [nd, out_dims[nd], in_dims[nd], before[nd]].
__kernel void mirror_pad(__global T* out, __global const T* x, const int n, __global const int* meta)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int nd = meta[0];
    int rem = i;
    long src = 0, stride = 1;
    for (int d = nd - 1; d >= 0; --d) {
        const int od = meta[1 + d];
        const int id = meta[1 + nd + d];
        const int p = rem % od;
        rem /= od;
        int j = p - meta[1 + 2 * nd + d];
        if (j < 0) j = -j - SHIFT;
        else if (j >= id) j = 2 * id - 2 + SHIFT - j;
        src += j * stride;
        stride *= id;
    }
    out[i] = x[src];
}

// MirrorPadGrad along one dimension: g viewed as [outer, n + before + after, inner], out as
// [outer, n, inner]. Position j of out sums its own padded position and the (at most one
// each) mirrored copies of it before and after, in position order (the CPU's order).
__kernel void mirror_pad_grad(__global T* out, __global const T* g, const int len, const int before,
                              const int after, const int inner, const int total)
{
    int i = get_global_id(0);
    if (i >= total) return;
    const int o = i / (len * inner);
    const int rest = i - o * len * inner;
    const int j = rest / inner;
    const int k = rest - j * inner;
    const int padded = len + before + after;
    __global const T* gr = g + (long)o * padded * inner + k;
    T acc = 0;
    const int head = before - SHIFT - j;             // the head position copying j
    if (head >= 0 && head < before) acc += gr[(long)head * inner];
    acc += gr[(long)(before + j) * inner];
    const int tail = len - 2 + SHIFT - j;            // the tail position copying j, counted from its start
    if (tail >= 0 && tail < after) acc += gr[(long)(before + len + tail) * inner];
    out[i] = acc;
}
