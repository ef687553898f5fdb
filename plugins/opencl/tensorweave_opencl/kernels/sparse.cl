// Sparse-tensor kernels. T: element type.

// SparseTensorDenseMatMul: out[rows[r], j] = sum of vals[e] * B[cols[e], j] over the entries
// e of output row rows[r] (g = [rows[m], off[m + 1], order[nnz]], kernels/scatter.cl's row
// groups), in entry order; B read with strides (bs_row, bs_col) so that its adjoint needs no
// copy. Rows without entries are zeroed beforehand.
__kernel void spmm(__global T* out, __global const T* vals, __global const T* b, __global const int* g,
                   __global const int* cols, const int m, const int ncols, const int bs_row, const int bs_col,
                   const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int r = i / ncols;
    const int j = i - r * ncols;
    __global const int* off = g + m;
    __global const int* order = g + 2 * m + 1;
    T acc = 0;
    for (int p = off[r]; p < off[r + 1]; ++p) {
        const int e = order[p];
        acc += b[(long)cols[e] * bs_row + (long)j * bs_col] * vals[e];
    }
    out[(long)g[r] * ncols + j] = acc;
}
