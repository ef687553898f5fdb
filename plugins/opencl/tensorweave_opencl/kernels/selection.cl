// Selections. T: element type; IS_FLOAT 1 for floating T.

#ifndef IS_FLOAT
#define IS_FLOAT 0
#endif

// Select: out[i] = cond[i / div] ? t[i] : e[i]; div is 1 (a condition of t's shape), the
// row size (a vector condition picks rows) or n (a scalar condition).
__kernel void select_(__global T* out, __global const uchar* cond, __global const T* t, __global const T* e,
                      const int div, const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    out[i] = cond[i / div] ? t[i] : e[i];
}

// Whether a ranks before b in a descending order: NaN above everything (as NumPy's sort
// puts it last, the CPU kernel's order), equal values by index.
#if IS_FLOAT
#define ABOVE(a, b) ((isnan(a) && !isnan(b)) || (a) > (b))
#define SAME(a, b) ((a) == (b) || (isnan(a) && isnan(b)))
#else
#define ABOVE(a, b) ((a) > (b))
#define SAME(a, b) ((a) == (b))
#endif

// TopKV2, one work item per input element: its rank in its row (how many elements rank
// before it; ties by index, lower first) places it in the output when below k. O(len) per
// item: rows up to some thousands are what top_k is used on (nearest neighbours, beams).
__kernel void top_k(__global T* values, __global int* indices, __global const T* x, const int len, const int k,
                    const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int row = i / len;
    const int j = i - row * len;
    __global const T* xr = x + (long)row * len;
    const T v = xr[j];
    int rank = 0;
    for (int q = 0; q < len && rank < k; ++q) {
        const T w = xr[q];
        if (ABOVE(w, v) || (q < j && SAME(w, v))) ++rank;
    }
    if (rank < k) {
        values[(long)row * k + rank] = v;
        indices[(long)row * k + rank] = j;
    }
}
