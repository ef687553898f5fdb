// Indexing kernels for one dtype, chosen at compile time as elementwise.cu's (TW_T, TW_SUFFIX,
// TW_KIND: 1 float, 2 integer, 3 bool). catalog.py lists which functions exist for which kind.
//
// Two kinds of index arrive here:
// - Indices that stay on the device (Gather, GatherNd, ScatterNd, UnsortedSegment*, OneHot,
//   InTopK, SparseTensorDenseMatMul): a kernel cannot raise, so an index out of range reads
//   zeros (gathers), is dropped (scatters, segment ids, sparse entries), matches no class
//   (OneHot: the off value) or is not in the top k (InTopK), TensorFlow's GPU conventions.
//   These functions come in an int32 and an int64 variant: tw_gather_i32_f32, tw_gather_i64_f32.
// - Row lists the host computed from host-memory indices it already checked (segment ops,
//   variable scatters, DynamicPartition/DynamicStitch, SparseToDense, SparseSegment*): int64
//   arrays, grouped by target row so that each output element is written by one thread
//   that applies its updates in their order (deterministic; no atomics needed).
#include "common.cuh"
#include "atomics.cuh"

typedef TW_T T;

// The value of a read out of range, and of empty outputs.
#define TW_ZERO_T ((T)0)

// ---------------------------------------------------------------------------------------
// gathers
// out[o, j, c] = params[o, idx[j], c]: params as [outer, axis_dim, inner], out as
// [outer, n_idx, inner] (Gather, GatherV2 on any axis, DynamicPartition's rows).
template <typename I>
__device__ void tw_gather(const T* __restrict__ params, const I* __restrict__ idx, T* __restrict__ out,
                          long long n, long long n_idx, long long axis_dim, long long inner) {
    TW_GRID_LOOP(i, n) {
        const long long c = i % inner, rest = i / inner;
        const long long j = rest % n_idx, o = rest / n_idx;
        const long long r = (long long)idx[j];
        out[i] = (r >= 0 && r < axis_dim) ? params[(o * axis_dim + r) * inner + c] : TW_ZERO_T;
    }
}

// The offset of row r of [N, K] indices into a tensor whose first K dimensions (shape, strides
// in elements) are s; false when a coordinate is out of range.
template <typename I>
__device__ __forceinline__ bool tw_nd_offset(const I* __restrict__ idx, long long r, const TwStrided& s,
                                             long long& off) {
    off = 0;
    bool ok = true;
#pragma unroll
    for (int d = 0; d < TW_MAX_DIMS; ++d) {
        if (d < s.ndim) {
            const long long v = (long long)idx[r * s.ndim + d];
            ok = ok && v >= 0 && v < s.shape[d];
            off += v * s.xs[d];
        }
    }
    return ok;
}

// out[r, c] = params[idx[r, :K], c] (GatherNd; slice = the elements one index addresses).
template <typename I>
__device__ void tw_gather_nd(const T* __restrict__ params, const I* __restrict__ idx, T* __restrict__ out,
                             long long n, long long slice, TwStrided s) {
    TW_GRID_LOOP(i, n) {
        long long off;
        const bool ok = tw_nd_offset(idx, i / slice, s, off);
        out[i] = ok ? params[off + i % slice] : TW_ZERO_T;
    }
}

#define TW_INDEXED_ALL(I, IS)                                                                          \
    extern "C" __global__ void TW_FN(gather, IS)(const T* params, const I* idx, T* out, long long n,   \
                                                 long long n_idx, long long axis_dim, long long inner) { \
        tw_gather<I>(params, idx, out, n, n_idx, axis_dim, inner);                                    \
    }                                                                                                  \
    extern "C" __global__ void TW_FN(gather_nd, IS)(const T* params, const I* idx, T* out, long long n, \
                                                    long long slice, TwStrided s) {                    \
        tw_gather_nd<I>(params, idx, out, n, slice, s);                                               \
    }                                                                                                  \
    /* out[o, d, r] = idx[o, r] == d ? on : off; out as [outer, depth, inner] (OneHot) */             \
    extern "C" __global__ void TW_FN(one_hot, IS)(const I* __restrict__ idx, const T* __restrict__ on, \
                                                  const T* __restrict__ off, T* __restrict__ out,      \
                                                  long long n, long long depth, long long inner) {     \
        const T a = *on, b = *off;                                                                     \
        TW_GRID_LOOP(i, n) {                                                                           \
            const long long r = i % inner, rest = i / inner;                                           \
            const long long d = rest % depth, o = rest / depth;                                        \
            out[i] = ((long long)idx[o * inner + r] == d) ? a : b;                                     \
        }                                                                                              \
    }

TW_INDEXED_ALL(int, i32)
TW_INDEXED_ALL(long long, i64)

// ---------------------------------------------------------------------------------------
// out = t where the condition holds, else e; one condition element covers `inner` elements
// (1: of the same shape; a row: a vector condition; all: a scalar one) (Select).
extern "C" __global__ void TW_FN1(select)(const tw_b8* __restrict__ cond, const T* __restrict__ t,
                                          const T* __restrict__ e, T* __restrict__ out, long long n,
                                          long long inner) {
    TW_GRID_LOOP(i, n) { out[i] = cond[i / inner] ? t[i] : e[i]; }
}

// Constant or mirrored padding (Pad, PadV2, MirrorPad). s.shape: the output's dimensions,
// s.xs: the input's, s.ys: the padding before each. mode 0: `value` (a device scalar, or
// zeros where it is null) outside the input; 1 REFLECT (the border not repeated);
// 2 SYMMETRIC (repeated). Mirror modes need padding <= the dimension (the host checks).
extern "C" __global__ void TW_FN1(pad)(const T* __restrict__ x, T* __restrict__ out, const T* __restrict__ value,
                                       long long n, int mode, TwBcast s) {
    const T v = (mode == 0 && value) ? *value : TW_ZERO_T;
    TW_GRID_LOOP(i, n) {
        long long rem = i, off = 0, stride = 1;
        bool inside = true;
#pragma unroll
        for (int d = TW_MAX_DIMS - 1; d >= 0; --d) {
            if (d < s.ndim) {
                const long long c = rem % s.shape[d];
                rem /= s.shape[d];
                const long long m = s.xs[d];
                long long p = c - s.ys[d];
                if (p < 0 || p >= m) {
                    if (mode == 0) inside = false;
                    else if (p < 0) p = mode == 1 ? -p : -p - 1;
                    else p = mode == 1 ? 2 * m - 2 - p : 2 * m - 1 - p;
                }
                off += p * stride;
                stride *= m;
            }
        }
        out[i] = inside ? x[off] : v;
    }
}

// ---------------------------------------------------------------------------------------
// Variable scatters, DynamicStitch, SparseToDense: target[rows[u], c] = combine(...) of its
// updates in order. The updates of row u are updates[order[p]] for p in [starts[u],
// starts[u+1]); starts null: one update per row, p = u; order null: order[p] = p. `scalar`:
// updates is one value for every element. kind: 0 update (the last one wins), 1 add, 2 sub,
// 3 mul, 4 div (integers: truncating, 0 for a zero divisor), 5 min, 6 max (NaN propagates).
__device__ __forceinline__ T tw_combine(int kind, T a, T b) {
#if TW_KIND == 3
    return b;  // bool: ScatterUpdate only
#else
    switch (kind) {
        case 0: return b;
        case 1: return a + b;
        case 2: return a - b;
        case 3: return a * b;
#if TW_KIND == 1
        case 4: return a / b;
#else
        // -1 by negation: INT_MIN / -1 traps on the CPU (the emulator) and wraps here anyway.
        case 4: return b == 0 ? TW_ZERO_T : (b == (T)-1 ? (T)(0ULL - (unsigned long long)a) : (T)(a / b));
#endif
        case 5: return tw_min(a, b);
        default: return tw_max(a, b);
    }
#endif
}

extern "C" __global__ void TW_FN1(scatter_rows)(T* __restrict__ target, const long long* __restrict__ rows,
                                                const long long* __restrict__ starts,
                                                const long long* __restrict__ order, const T* __restrict__ updates,
                                                long long n, long long inner, int scalar, int kind) {
    TW_GRID_LOOP(i, n) {
        const long long u = i / inner, c = i % inner;
        T* t = target + rows[u] * inner + c;
        T acc = *t;
        const long long b = starts ? starts[u] : u, e = starts ? starts[u + 1] : u + 1;
        for (long long p = b; p < e; ++p) {
            const long long j = order ? order[p] : p;
            acc = tw_combine(kind, acc, scalar ? updates[0] : updates[j * inner + c]);
        }
        *t = acc;
    }
}

#if TW_KIND != 3
// ---------------------------------------------------------------------------------------
// Numbers: atomics for device-side indices, per-output loops for host-grouped rows.

// The lowest and highest finite values: what an empty UnsortedSegmentMax/Min holds (the CPU
// kernels' and TensorFlow's numeric_limits::lowest/max; TwLimits gives infinities).
__device__ __forceinline__ T tw_finite_lowest() {
#if TW_KIND == 1
    return sizeof(T) == 4 ? (T)-3.402823466e+38f : (T)-1.7976931348623157e+308;
#else
    return TwLimits<T>::lowest();
#endif
}

__device__ __forceinline__ T tw_finite_highest() {
#if TW_KIND == 1
    return -tw_finite_lowest();
#else
    return TwLimits<T>::highest();
#endif
}

template <typename I, typename Op>
__device__ void tw_unsorted_segment(const T* __restrict__ data, const I* __restrict__ ids, T* out, long long n,
                                    long long inner, long long num, Op op) {
    TW_GRID_LOOP(i, n) {
        const long long s = (long long)ids[i / inner];
        if (s >= 0 && s < num) op(out + s * inner + i % inner, data[i]);
    }
}

struct TwAtomicAddTo {
    __device__ __forceinline__ void operator()(T* p, T v) const { tw_atomic_add(p, v); }
};
struct TwAtomicMaxTo {
    __device__ __forceinline__ void operator()(T* p, T v) const { tw_atomic_max(p, v); }
};
struct TwAtomicMinTo {
    __device__ __forceinline__ void operator()(T* p, T v) const { tw_atomic_min(p, v); }
};

#define TW_INDEXED_NUMERIC(I, IS)                                                                      \
    /* out (filled with the identity first) op= data[i] at row ids[i / inner]; ids out of          \
       [0, num) are dropped (UnsortedSegmentSum/Max/Min) */                                          \
    extern "C" __global__ void TW_FN(unsorted_segment_sum, IS)(const T* data, const I* ids, T* out,    \
                                                               long long n, long long inner,           \
                                                               long long num) {                        \
        tw_unsorted_segment<I>(data, ids, out, n, inner, num, TwAtomicAddTo());                        \
    }                                                                                                  \
    extern "C" __global__ void TW_FN(unsorted_segment_max, IS)(const T* data, const I* ids, T* out,    \
                                                               long long n, long long inner,           \
                                                               long long num) {                        \
        tw_unsorted_segment<I>(data, ids, out, n, inner, num, TwAtomicMaxTo());                        \
    }                                                                                                  \
    extern "C" __global__ void TW_FN(unsorted_segment_min, IS)(const T* data, const I* ids, T* out,    \
                                                               long long n, long long inner,           \
                                                               long long num) {                        \
        tw_unsorted_segment<I>(data, ids, out, n, inner, num, TwAtomicMinTo());                        \
    }                                                                                                  \
    /* out (zeros) += updates at [N, K] indices; n = N * slice; rows out of range dropped */         \
    extern "C" __global__ void TW_FN(scatter_nd_add, IS)(const I* __restrict__ idx,                    \
                                                         const T* __restrict__ updates, T* out,        \
                                                         long long n, long long slice, TwStrided s) {  \
        TW_GRID_LOOP(i, n) {                                                                           \
            long long off;                                                                             \
            if (tw_nd_offset(idx, i / slice, s, off)) tw_atomic_add(out + off + i % slice, updates[i]); \
        }                                                                                              \
    }

TW_INDEXED_NUMERIC(int, i32)
TW_INDEXED_NUMERIC(long long, i64)

// Sorted segment reductions (SegmentSum/Mean/Max/Min, SparseSegmentSum/Mean/SqrtN): one
// thread per (present segment u, column c) folds data[rows[p], c] over p in [starts[u],
// starts[u+1]) in order (rows null: row p) into out[segs[u], c]; empty segments are the
// zeros the host filled. kind: 0 sum, 1 mean, 2 sqrtn (floats), 3 max, 4 min (from the
// lowest/highest finite value, as the CPU kernels).
extern "C" __global__ void TW_FN1(segment_reduce)(const T* __restrict__ data, const long long* __restrict__ rows,
                                                  const long long* __restrict__ starts,
                                                  const long long* __restrict__ segs, T* __restrict__ out,
                                                  long long n, long long inner, int kind) {
    TW_GRID_LOOP(i, n) {
        const long long u = i / inner, c = i % inner;
        const long long b = starts[u], e = starts[u + 1];
        T acc = kind == 3 ? tw_finite_lowest() : kind == 4 ? tw_finite_highest() : TW_ZERO_T;
        for (long long p = b; p < e; ++p) {
            const T v = data[(rows ? rows[p] : p) * inner + c];
            acc = kind == 3 ? tw_max(acc, v) : kind == 4 ? tw_min(acc, v) : acc + v;
        }
        if (kind == 1) acc = acc / (T)(e - b);  // integers: truncating, as the CPU kernels
#if TW_KIND == 1
        if (kind == 2) acc = acc / tw_sqrt((T)(e - b));
#endif
        out[segs[u] * inner + c] = acc;
    }
}

// The top k of each row of x ([rows, n]), largest first, equal values in index order, NaN
// above everything (the CPU kernel's order): one block per row, k passes, each a block-wide
// search for the first element after the one the last pass chose. Indices are int32.
__device__ __forceinline__ bool tw_topk_before(T a, long long ia, T b, long long ib) {
    const bool na = a != a, nb = b != b;
    if (na != nb) return na;
    if (!na && a != b) return a > b;
    return ia < ib;
}

extern "C" __global__ void TW_FN1(top_k)(const T* __restrict__ x, T* __restrict__ values, int* __restrict__ indices,
                                         long long rows, long long n, long long k) {
    __shared__ T sv[TW_MAX_BLOCK];
    __shared__ long long si[TW_MAX_BLOCK];
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * n;
        T prev_v = TW_ZERO_T;
        long long prev_i = -1;
        for (long long t = 0; t < k; ++t) {
            T best_v = TW_ZERO_T;
            long long best_i = -1;
            for (long long j = threadIdx.x; j < n; j += blockDim.x) {
                const T v = xr[j];
                if (prev_i >= 0 && !tw_topk_before(prev_v, prev_i, v, j)) continue;
                if (best_i < 0 || tw_topk_before(v, j, best_v, best_i)) {
                    best_v = v;
                    best_i = j;
                }
            }
            sv[threadIdx.x] = best_v;
            si[threadIdx.x] = best_i;
            __syncthreads();
            for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
                if (threadIdx.x < s) {
                    const long long oi = si[threadIdx.x + s];
                    if (oi >= 0 && (si[threadIdx.x] < 0 || tw_topk_before(sv[threadIdx.x + s], oi, sv[threadIdx.x],
                                                                            si[threadIdx.x]))) {
                        sv[threadIdx.x] = sv[threadIdx.x + s];
                        si[threadIdx.x] = oi;
                    }
                }
                __syncthreads();
            }
            prev_v = sv[0];
            prev_i = si[0];
            if (threadIdx.x == 0) {
                values[row * k + t] = prev_v;
                indices[row * k + t] = (int)prev_i;
            }
            __syncthreads();  // sv/si are reused by the next pass
        }
    }
}

// MirrorPadGrad: out (the unpadded shape, s.shape) sums the gradient g (s.xs) at every
// position that MirrorPad copied from it: per dimension the position itself and at most one
// mirror in each padded border (s.ys: the padding before). One thread per output element,
// no atomics. mode 1 REFLECT, 2 SYMMETRIC.
extern "C" __global__ void TW_FN1(mirror_pad_grad)(const T* __restrict__ g, T* __restrict__ out, long long n,
                                                   int mode, TwBcast s) {
    TW_GRID_LOOP(i, n) {
        long long cand[TW_MAX_DIMS][3];
        int count[TW_MAX_DIMS];
        long long gstride[TW_MAX_DIMS];
        long long rem = i, stride = 1;
        for (int d = TW_MAX_DIMS - 1; d >= 0; --d) {
            count[d] = 1;
            cand[d][0] = 0;
            gstride[d] = 0;
            if (d < s.ndim) {
                const long long m = s.shape[d], c = rem % m, b = s.ys[d], a = s.xs[d] - m - b;
                rem /= m;
                gstride[d] = stride;
                stride *= s.xs[d];
                cand[d][0] = c + b;
                const long long head = mode == 1 ? b - c : b - 1 - c;  // its mirror before the input
                if (head >= 0 && head < b) cand[d][count[d]++] = head;
                const long long tail = mode == 1 ? 2 * m - 2 - c : 2 * m - 1 - c;  // after it
                if (tail >= m && tail < m + a) cand[d][count[d]++] = b + tail;
            }
        }
        int k[TW_MAX_DIMS];
        for (int d = 0; d < TW_MAX_DIMS; ++d) k[d] = 0;
        T acc = TW_ZERO_T;
        for (;;) {
            long long off = 0;
            for (int d = 0; d < TW_MAX_DIMS; ++d) off += cand[d][k[d]] * gstride[d];
            acc = acc + g[off];
            int d = TW_MAX_DIMS - 1;
            while (d >= 0 && ++k[d] == count[d]) k[d--] = 0;
            if (d < 0) break;
        }
        out[i] = acc;
    }
}
#endif  // TW_KIND != 3

#if TW_KIND == 1
// ---------------------------------------------------------------------------------------
// Floats

// SparseSegmentMeanGrad/SqrtNGrad: out[rows[u], c] (zeros elsewhere) = sum over the positions
// p of row u, in order, of grad[segs[j], c] / div[j] (j = order[p]; div: the count, or its
// square root, of j's segment, computed on the host in T as the CPU kernel does).
extern "C" __global__ void TW_FN1(segment_grad)(const T* __restrict__ grad, const long long* __restrict__ segs,
                                                const T* __restrict__ div, const long long* __restrict__ rows,
                                                const long long* __restrict__ starts,
                                                const long long* __restrict__ order, T* __restrict__ out,
                                                long long n, long long inner) {
    TW_GRID_LOOP(i, n) {
        const long long u = i / inner, c = i % inner;
        const long long b = starts ? starts[u] : u, e = starts ? starts[u + 1] : u + 1;
        T acc = TW_ZERO_T;
        for (long long p = b; p < e; ++p) {
            const long long j = order ? order[p] : p;
            acc = acc + grad[segs[j] * inner + c] / div[j];
        }
        out[rows[u] * inner + c] = acc;
    }
}

#define TW_INDEXED_FLOAT(I, IS)                                                                         \
    /* out[r] = targets[r] in range, its prediction finite, and fewer than k predictions of the      \
       row larger (ties are in) (InTopK) */                                                           \
    extern "C" __global__ void TW_FN(in_top_k, IS)(const T* __restrict__ pred, const I* __restrict__ targets, \
                                                   tw_b8* __restrict__ out, long long rows, long long classes, \
                                                   long long k) {                                       \
        TW_GRID_LOOP(r, rows) {                                                                         \
            const long long t = (long long)targets[r];                                                  \
            bool in = false;                                                                            \
            if (t >= 0 && t < classes) {                                                                \
                const T* p = pred + r * classes;                                                        \
                const T v = p[t];                                                                       \
                if (v == v && v - v == v - v) {                                                         \
                    long long larger = 0;                                                               \
                    for (long long j = 0; j < classes; ++j) larger += p[j] > v;                         \
                    in = larger < k;                                                                    \
                }                                                                                       \
            }                                                                                           \
            out[r] = in;                                                                                \
        }                                                                                               \
    }                                                                                                   \
    /* out ([m, n], zeros) += op(A) @ op(B) for the sparse A (nnz entries [row, col] and values):    \
       one thread per (entry, column); entries outside A's shape are dropped */                      \
    extern "C" __global__ void TW_FN(sparse_dense_matmul, IS)(const I* __restrict__ a_idx,             \
                                                              const T* __restrict__ a_val,              \
                                                              const T* __restrict__ b, T* out,          \
                                                              long long total, long long n, long long m, \
                                                              long long k, int adj_a, int adj_b) {      \
        TW_GRID_LOOP(i, total) {                                                                        \
            const long long e = i / n, j = i % n;                                                       \
            long long r = (long long)a_idx[2 * e], q = (long long)a_idx[2 * e + 1];                     \
            if (adj_a) {                                                                                \
                const long long tmp = r;                                                                \
                r = q;                                                                                  \
                q = tmp;                                                                                \
            }                                                                                           \
            if (r < 0 || r >= m || q < 0 || q >= k) continue;                                          \
            tw_atomic_add(out + r * n + j, a_val[e] * (adj_b ? b[j * k + q] : b[q * n + j]));           \
        }                                                                                               \
    }

TW_INDEXED_FLOAT(int, i32)
TW_INDEXED_FLOAT(long long, i64)
#endif  // TW_KIND == 1
