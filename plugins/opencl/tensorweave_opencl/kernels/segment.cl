// Reductions over sorted segments. T: element type; TI: index type of the sparse forms.
// COMBINE(a, v), INIT: the reduction; SCALE(count): what the mean (count) or sqrt-n
// (sqrt(count)) divides by, none for the others;
// SPARSE: rows are read through idx (SparseSegment*), else row j of data is entry j.
//
// The host has checked the segment ids (sorted, >= 0) and turned them into offsets: segment
// s holds entries off[s] .. off[s + 1] - 1. One work item per output element reduces its
// segment's entries in order; an empty segment is 0.

#ifndef TI
#define TI int
#endif
#ifndef COMBINE
#define COMBINE(a, v) ((a) + (v))
#endif
#ifndef INIT
#define INIT 0
#endif
#ifdef SCALE
#define FINISH(acc, count) ((acc) / SCALE(count))
#else
#define FINISH(acc, count) (acc)
#endif
#ifndef SPARSE
#define SPARSE 0
#endif

// A sparse entry's row outside [0, rows) reads zeros (the device cannot raise; the CPU does).
__kernel void segment_reduce(__global T* out, __global const T* data, __global const TI* idx,
                             __global const int* off, const int rows, const int inner, const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int s = i / inner;
    const int k = i - s * inner;
    const int b = off[s], e = off[s + 1];
    if (b == e) {
        out[i] = (T)0;
        return;
    }
    T acc = INIT;
    for (int j = b; j < e; ++j) {
#if SPARSE
        const TI r = idx[j];
        const T v = (r >= 0 && r < rows) ? data[(long)r * inner + k] : (T)0;
#else
        const T v = data[(long)j * inner + k];
#endif
        acc = COMBINE(acc, v);
    }
    out[i] = FINISH(acc, e - b);
}

// SparseSegmentMeanGrad/SqrtNGrad: out[rows[r]] = sum over the entries j of destination row
// rows[r] (g = [rows[m], off[m + 1], order[n]], as kernels/scatter.cl's) of
// grad[seg[j]] / SCALE(count[seg[j]]), in entry order (the CPU's order); segs = [seg[nent], count[segments]].
__kernel void segment_grad(__global T* out, __global const T* grad, __global const int* g,
                           __global const int* segs, const int m, const int nent, const int inner, const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int r = i / inner;
    const int k = i - r * inner;
    __global const int* off = g + m;
    __global const int* order = g + 2 * m + 1;
    T acc = 0;
    for (int p = off[r]; p < off[r + 1]; ++p) {
        const int s = segs[order[p]];
        acc += FINISH(grad[(long)s * inner + k], segs[nent + s]);
    }
    out[(long)g[r] * inner + k] = acc;
}
