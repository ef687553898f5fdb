// C[b] = op(A[b]) x op(B[b]). Two kernels; matmul.py picks one by device kind:
//   matmul_tiled    TS x TS work groups share tiles of A and B through local memory: the
//                   classic GPU kernel (each element of A and B read once per tile row/column).
//   matmul_blocked  no local memory: each work item keeps a RB x 8 block of C in registers
//                   and reads 8 consecutive elements of B as one vector, which CPU devices
//                   (PoCL) turn into SIMD; it is ~7x faster than the tiled kernel there.
// Defines: T element type, V its 8-wide vector type (float8, ...), TS tile size, RB rows per
// work item, TA/TB 1 to transpose A/B. A is M x K after op(), stored [M, K] (TA 0) or [K, M]
// (TA 1); B is K x N. Batches are get_global_id(2), `stride_*` elements apart (0: shared).
// Epilogue (_FusedMatMul): with BIAS defined the kernels take one more buffer, `bias`, added
// to each row; RELU 1 / RELU6 1 then rectify, with the element-wise kernels' expressions.

#if TA
#define A_AT(m, k) A[(k) * M + (m)]
#else
#define A_AT(m, k) A[(m) * K + (k)]
#endif
#if TB
#define B_AT(k, n) B[(n) * K + (k)]
#define B_ROW8(k, n) ((V)(B_AT(k, n), B_AT(k, n + 1), B_AT(k, n + 2), B_AT(k, n + 3), \
                          B_AT(k, n + 4), B_AT(k, n + 5), B_AT(k, n + 6), B_AT(k, n + 7)))
#else
#define B_AT(k, n) B[(k) * N + (n)]
#define B_ROW8(k, n) vload8(0, B + (k) * N + (n))
#endif

#ifdef BIAS
#define BIAS_ARG , __global const T* bias
#else
#define BIAS_ARG
#endif
#if RELU
#define ACT(x) ((x) < 0 ? (T)0 : (x))
#define ACT8(v) select((v), (V)(0), isless((v), (V)(0)))
#elif RELU6
#define ACT(x) ((x) < 0 ? (T)0 : ((x) > 6 ? (T)6 : (x)))
#define ACT8(v) select(select((v), (V)(0), isless((v), (V)(0))), (V)(6), isgreater((v), (V)(6)))
#else
#define ACT(x) (x)
#define ACT8(v) (v)
#endif
#ifdef BIAS
#define EPI(x, n) ACT((x) + bias[n])
#define EPI8(v, n) ACT8((v) + vload8(0, bias + (n)))
#else
#define EPI(x, n) (x)
#define EPI8(v, n) (v)
#endif

__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))
void matmul_tiled(__global T* C, __global const T* A0, __global const T* B0, const int M, const int N,
                  const int K, const int stride_a, const int stride_b BIAS_ARG)
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
        C[(long)batch * M * N + row * N + col] = EPI(acc, col);
}

// Work item (i, j) computes rows RB*j .. RB*j+RB-1, columns 8*i .. 8*i+7 of C.
__kernel void matmul_blocked(__global T* C0, __global const T* A0, __global const T* B0, const int M,
                             const int N, const int K, const int stride_a, const int stride_b BIAS_ARG)
{
    const int n0 = get_global_id(0) * 8;
    const int m0 = get_global_id(1) * RB;
    const int batch = get_global_id(2);
    if (n0 >= N || m0 >= M) return;
    __global const T* A = A0 + (long)batch * stride_a;
    __global const T* B = B0 + (long)batch * stride_b;
    __global T* C = C0 + (long)batch * M * N;
    if (n0 + 8 <= N) {
        V acc[RB];
        for (int r = 0; r < RB; ++r) acc[r] = (V)(0);
        for (int k = 0; k < K; ++k) {
            const V b = B_ROW8(k, n0);
            for (int r = 0; r < RB; ++r)
                acc[r] += A_AT(min(m0 + r, M - 1), k) * b;  // clamped: rows past M are computed, not stored
        }
        for (int r = 0; r < RB && m0 + r < M; ++r)
            vstore8(EPI8(acc[r], n0), 0, C + (m0 + r) * N + n0);
    } else {  // the last, partial group of columns
        for (int r = 0; r < RB && m0 + r < M; ++r)
            for (int n = n0; n < N; ++n) {
                T s = 0;
                for (int k = 0; k < K; ++k) s += A_AT(m0 + r, k) * B_AT(k, n);
                C[(m0 + r) * N + n] = EPI(s, n);
            }
    }
}
