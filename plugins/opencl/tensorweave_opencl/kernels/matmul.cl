// C[b] = op(A[b]) x op(B[b]), tiled through local memory. Defines:
//   T element type; TS tile size (work group TS x TS); TA, TB 1 to transpose A, B.
// A is M x K after op(), stored [M, K] (TA 0) or [K, M] (TA 1); likewise B is K x N.
// Batches are get_global_id(2), `stride_*` elements apart (0: the operand is shared).

#if TA
#define A_AT(m, k) A[(k) * M + (m)]
#else
#define A_AT(m, k) A[(m) * K + (k)]
#endif
#if TB
#define B_AT(k, n) B[(n) * K + (k)]
#else
#define B_AT(k, n) B[(k) * N + (n)]
#endif

__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))
void matmul(__global T* C, __global const T* A0, __global const T* B0, const int M, const int N, const int K,
            const int stride_a, const int stride_b)
{
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    const int lc = get_local_id(0);
    const int lr = get_local_id(1);
    const int batch = get_global_id(2);
    __global const T* A = A0 + (long)batch * stride_a;
    __global const T* B = B0 + (long)batch * stride_b;
    __local T As[TS][TS];
    __local T Bs[TS][TS + 1];  // +1: column reads of Bs fall in different banks
    T acc = 0;
    for (int t = 0; t < K; t += TS) {
        const int ka = t + lc;
        const int kb = t + lr;
        As[lr][lc] = (row < M && ka < K) ? A_AT(row, ka) : (T)0;
        Bs[lr][lc] = (kb < K && col < N) ? B_AT(kb, col) : (T)0;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TS; ++k)
            acc += As[lr][k] * Bs[k][lc];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < M && col < N)
        C[(long)batch * M * N + row * N + col] = acc;
}
