// Cumulative sums and products along the middle axis of an [outer, len, inner] view: one
// work item per (outer, inner) lane walks its line. T element type; OP(s, v) the
// accumulation, INIT its identity; EXCLUSIVE, REVERSE 0 or 1.

__kernel void scan(__global T* out, __global const T* x, const int outer, const int len, const int inner)
{
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    int o = g / inner, i = g - o * inner;
    long base = (long)o * len * inner + i;
    T s = INIT;
    for (int step = 0; step < len; ++step) {
        int r = REVERSE ? len - 1 - step : step;
        long at = base + (long)r * inner;
        T v = x[at];
#if EXCLUSIVE
        out[at] = s;
        s = OP(s, v);
#else
        s = OP(s, v);
        out[at] = s;
#endif
    }
}
