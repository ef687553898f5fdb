// Scatters by row groups. T: element type; APPLY(a, u): how an update u combines with the
// current value a (assignment, +, -, *, /, min, max).
//
// Duplicate indices: the host groups the updates by destination row (kernels/scatter.py,
// RowGroups) into one int table g = [rows[m], off[m + 1], order[n]]: destination row
// rows[r] receives the updates order[off[r]] .. order[off[r + 1] - 1], in their original
// order. One work item per (destination row, element of the row) applies them in that
// order: no atomics, every dtype, the same result (bit for bit) as applying the updates
// one after the other on the host.

#ifndef APPLY
#define APPLY(a, u) (u)
#endif

// target[rows[r] * inner + k] = APPLY(... APPLY(target[..], upd[order[off[r]]]) ..) in place.
// scalar: upd is one element applied to every row.
__kernel void scatter_rows(__global T* target, __global const T* upd, __global const int* g, const int m,
                           const int inner, const int scalar, const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int r = i / inner;
    const int k = i - r * inner;
    __global const int* off = g + m;
    __global const int* order = g + 2 * m + 1;
    const long t = (long)g[r] * inner + k;
    T acc = target[t];
    for (int p = off[r]; p < off[r + 1]; ++p) {
        const T u = scalar ? upd[0] : upd[(long)order[p] * inner + k];
        acc = APPLY(acc, u);
    }
    target[t] = acc;
}

// out[dst[j] * inner + k] = x[src[j] * inner + k] for j < rows: row copies (DynamicStitch's
// winners, DynamicPartition's parts, SparseReorder's permutation). idx = [dst[rows], src[rows]].
__kernel void copy_rows(__global T* out, __global const T* x, __global const int* idx, const int rows,
                        const int inner, const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int j = i / inner;
    const int k = i - j * inner;
    out[(long)idx[j] * inner + k] = x[(long)idx[rows + j] * inner + k];
}
