// Element-wise kernels. Specialised by defines:
//   T     element type of the inputs        R   element type of the result
//   EXPR  the result for one element, from `a` (unary) or `a`, `b` (binary), of type T
//   BINARY defined for the binary kernels (EXPR uses `b`), absent for `unary`
// Indices are int: no single buffer holds 2^31 elements (see allocator.py, max_alloc_size).

#ifndef R
#define R T
#endif

#ifndef BINARY
__kernel void unary(__global R* out, __global const T* x, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        T a = x[i];
        out[i] = (R)(EXPR);
    }
}

#else
// Both inputs have the output's shape.
__kernel void binary_same(__global R* out, __global const T* x, __global const T* y, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        T a = x[i];
        T b = y[i];
        out[i] = (R)(EXPR);
    }
}

// y is one element, broadcast against x.
__kernel void binary_scalar_y(__global R* out, __global const T* x, __global const T* y, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        T a = x[i];
        T b = y[0];
        out[i] = (R)(EXPR);
    }
}

// x is one element, broadcast against y.
__kernel void binary_scalar_x(__global R* out, __global const T* x, __global const T* y, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        T a = x[0];
        T b = y[i];
        out[i] = (R)(EXPR);
    }
}

// y repeats every m elements of x (a bias row added to every row of a matrix).
__kernel void binary_rows_y(__global R* out, __global const T* x, __global const T* y, const int n, const int m)
{
    int i = get_global_id(0);
    if (i < n) {
        T a = x[i];
        T b = y[i % m];
        out[i] = (R)(EXPR);
    }
}

// x repeats every m elements of y.
__kernel void binary_rows_x(__global R* out, __global const T* x, __global const T* y, const int n, const int m)
{
    int i = get_global_id(0);
    if (i < n) {
        T a = x[i % m];
        T b = y[i];
        out[i] = (R)(EXPR);
    }
}

// General NumPy broadcasting. meta = [nd, dims[nd], x_strides[nd], y_strides[nd]] in
// elements, a stride of 0 on a broadcast dimension; dims are already collapsed.
__kernel void binary_bcast(__global R* out, __global const T* x, __global const T* y, const int n,
                           __global const int* meta)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int nd = meta[0];
    int rem = i, xo = 0, yo = 0;
    for (int d = nd - 1; d >= 0; --d) {
        const int dim = meta[1 + d];
        const int idx = rem % dim;
        rem /= dim;
        xo += idx * meta[1 + nd + d];
        yo += idx * meta[1 + 2 * nd + d];
    }
    T a = x[xo];
    T b = y[yo];
    out[i] = (R)(EXPR);
}
#endif
