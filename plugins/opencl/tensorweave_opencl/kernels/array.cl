// Array kernels. T: element type; TI: index type of one_hot.
#ifndef TI
#define TI int
#endif

// Strided copy: element i of the index space `dims` (row-major) is read at
// x_off + sum(idx_d * xs_d) and written at o_off + sum(idx_d * os_d).
// meta = [nd, dims[nd], xs[nd], os[nd], x_off, o_off]. T: element type.
// BroadcastTo (xs = 0 on broadcast dims), Tile, Transpose, Slice, and each input of a
// Concat are all this one kernel with different tables.

__kernel void strided_copy(__global T* out, __global const T* x, const int n, __global const int* meta)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int nd = meta[0];
    int rem = i;
    int xo = meta[1 + 3 * nd];
    int oo = meta[2 + 3 * nd];
    for (int d = nd - 1; d >= 0; --d) {
        const int dim = meta[1 + d];
        const int idx = rem % dim;
        rem /= dim;
        xo += idx * meta[1 + nd + d];
        oo += idx * meta[1 + 2 * nd + d];
    }
    out[oo] = x[xo];
}

// out[i] = value[0] (a device scalar: Fill).
__kernel void fill_from(__global T* out, __global const T* value, const int n)
{
    int i = get_global_id(0);
    if (i < n) out[i] = value[0];
}

// out[i] = v (ZerosLike, OnesLike).
__kernel void fill(__global T* out, const T v, const int n)
{
    int i = get_global_id(0);
    if (i < n) out[i] = v;
}

// OneHot: out viewed as [outer, depth, inner], indices as [outer, inner].
__kernel void one_hot(__global T* out, __global const TI* indices, __global const T* on,
                      __global const T* off, const int n, const int depth, const int inner)
{
    int i = get_global_id(0);
    if (i >= n) return;
    int o = i / (depth * inner);
    int rest = i - o * depth * inner;
    int d = rest / inner;
    int k = rest - d * inner;
    out[i] = (indices[o * inner + k] == (TI)d) ? on[0] : off[0];
}
