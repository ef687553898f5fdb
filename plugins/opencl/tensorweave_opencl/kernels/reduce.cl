// Reductions over the middle axis of an [outer, len, inner] view of the input.
// Specialised by defines:
//   T input type, A accumulator type, R result type
//   INIT          the identity of COMBINE, of type A
//   MAP(x)        what is accumulated for element x (x, or x * x for L2Loss)
//   COMBINE(s, v) the accumulation (s + v, s * v, a NaN-propagating max, ...)
//   FINAL(s, n)   the result from the accumulator and `count`, the number of elements the
//                 whole reduction covers (it may take several passes over separate axes)
//   WG            work-group size of reduce_rows (a power of two)
// With ARG defined, only arg_reduce is built (defines T, R, BETTER, IS_NAN).

#ifndef ARG

// One work item per output element: good when `inner` gives enough outputs, and reads
// neighbouring work items' elements side by side.
__kernel void reduce_strided(__global R* out, __global const T* x, const int outer, const int len,
                             const int inner, const int count)
{
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    int o = g / inner, i = g - o * inner;
    __global const T* p = x + (long)o * len * inner + i;
    A s = INIT;
    for (int r = 0; r < len; ++r) {
        A v = MAP((A)p[(long)r * inner]);
        s = COMBINE(s, v);
    }
    out[g] = (R)(FINAL(s, count));
}

// inner == 1: one work group per output row, a tree in local memory.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void reduce_rows(__global R* out, __global const T* x, const int rows, const int len, const int count)
{
    __local A part[WG];
    int row = get_group_id(0);
    int lid = get_local_id(0);
    __global const T* p = x + (long)row * len;
    A s = INIT;
    for (int r = lid; r < len; r += WG) {
        A v = MAP((A)p[r]);
        s = COMBINE(s, v);
    }
    part[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = WG / 2; step > 0; step >>= 1) {
        if (lid < step) part[lid] = COMBINE(part[lid], part[lid + step]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[row] = (R)(FINAL(part[0], count));
}

#else
// ArgMax / ArgMin over the middle axis: the first index of the extreme value; a NaN is
// the extreme (the first NaN wins), as with np.argmax. BETTER(v, best) is v > best or v < best.
__kernel void arg_reduce(__global R* out, __global const T* x, const int outer, const int len,
                         const int inner)
{
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    int o = g / inner, i = g - o * inner;
    __global const T* p = x + (long)o * len * inner + i;
    T best = p[0];
    int at = 0;
    for (int r = 1; r < len && !IS_NAN(best); ++r) {
        T v = p[(long)r * inner];
        if (BETTER(v, best) || IS_NAN(v)) { best = v; at = r; }
    }
    out[g] = (R)at;
}
#endif
