// Atomic read-modify-write of one element, for the kernels whose threads may write the same
// output (ScatterNd, UnsortedSegmentSum/Max/Min, SparseTensorDenseMatMul: repeated indices).
//
// On the GPU (nvcc defines __CUDACC__) additions use atomicAdd: float, double (sm_60 and
// later), int, and 64-bit integers as unsigned long long (two's complement: the same bits).
// Max and min have no float atomic in CUDA, so they are a compare-and-swap loop on the
// value's bits (NaN-propagating, as tw_max/tw_min). Under the CPU emulator (g++, no
// __CUDACC__) every operation is such a loop on GCC's __atomic builtins: the threads of an
// emulated block run concurrently as OpenMP threads.
//
// Float sums by atomics are done in whatever order the threads arrive: equal to a sequential
// sum within rounding, not bit for bit, and not the same from run to run.
#ifndef TW_ATOMICS_CUH
#define TW_ATOMICS_CUH

template <typename T> struct TwBits;
template <> struct TwBits<float> { typedef unsigned int U; };
template <> struct TwBits<double> { typedef unsigned long long U; };
template <> struct TwBits<int> { typedef unsigned int U; };
template <> struct TwBits<long long> { typedef unsigned long long U; };

template <typename T> __device__ __forceinline__ typename TwBits<T>::U tw_to_bits(T v) {
    union { T t; typename TwBits<T>::U u; } c;
    c.t = v;
    return c.u;
}

template <typename T> __device__ __forceinline__ T tw_from_bits(typename TwBits<T>::U u) {
    union { T t; typename TwBits<T>::U u; } c;
    c.u = u;
    return c.t;
}

// Stores `want` at p if it holds `expect`; returns what p held. U: unsigned int or unsigned
// long long (atomicCAS's 32- and 64-bit overloads).
template <typename U> __device__ __forceinline__ U tw_cas(U* p, U expect, U want) {
#ifdef __CUDACC__
    return atomicCAS(p, expect, want);
#else
    __atomic_compare_exchange_n(p, &expect, want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expect;
#endif
}

template <typename U> __device__ __forceinline__ U tw_load_bits(U* p) {
#ifdef __CUDACC__
    return *(volatile U*)p;
#else
    return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

// *p = op(*p, v), atomically.
template <typename T, typename Op> __device__ __forceinline__ void tw_atomic_rmw(T* p, T v, Op op) {
    typedef typename TwBits<T>::U U;
    U* q = (U*)p;
    U old = tw_load_bits(q);
    for (;;) {
        const U want = tw_to_bits(op(tw_from_bits<T>(old), v));
        if (want == old) return;  // nothing to change (a max already larger, say)
        const U seen = tw_cas(q, old, want);
        if (seen == old) return;
        old = seen;
    }
}

struct TwMinOp {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return tw_min(a, b); }
};

#ifdef __CUDACC__
__device__ __forceinline__ void tw_atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void tw_atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void tw_atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void tw_atomic_add(long long* p, long long v) {
    atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
#else
template <typename T> __device__ __forceinline__ void tw_atomic_add(T* p, T v) { tw_atomic_rmw(p, v, TwSumOp()); }
#endif

template <typename T> __device__ __forceinline__ void tw_atomic_max(T* p, T v) { tw_atomic_rmw(p, v, TwMaxOp()); }
template <typename T> __device__ __forceinline__ void tw_atomic_min(T* p, T v) { tw_atomic_rmw(p, v, TwMinOp()); }

#endif  // TW_ATOMICS_CUH
