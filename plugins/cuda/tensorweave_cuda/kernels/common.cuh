// Shared definitions of the CUDA kernels. program.py pastes this file in place of
// `#include "common.cuh"` before compiling, so a module's cache key covers it.
//
// Conventions: every tensor is dense and row-major; element counts and indices are 64-bit;
// element-wise kernels are grid-stride loops (one launch size fits any n); block reductions
// assume a power-of-two blockDim of at most TW_MAX_BLOCK. Kernel names are extern "C" and
// end in their dtype suffix (tw_add_flat_f32), as catalog.py names them.
#ifndef TW_COMMON_CUH
#define TW_COMMON_CUH

typedef long long tw_i64;
typedef unsigned char tw_b8;
typedef unsigned short tw_u16;  // the bfloat16 form of compressed transfers (compression.cu)

#define TW_MAX_DIMS 6
#define TW_MAX_BLOCK 256

// Strides (in elements) of one operand for each dimension of the output; 0 = broadcast.
struct TwStrided {
    long long ndim;
    long long shape[TW_MAX_DIMS];
    long long xs[TW_MAX_DIMS];
};

struct TwBcast {
    long long ndim;
    long long shape[TW_MAX_DIMS];
    long long xs[TW_MAX_DIMS];
    long long ys[TW_MAX_DIMS];
};

#define TW_CAT2(a, b) a##b
#define TW_CAT(a, b) TW_CAT2(a, b)
// tw_<name>_<TW_SUFFIX> and tw_<name>_<variant>_<TW_SUFFIX>
#define TW_FN1(name) TW_CAT(TW_CAT(tw_, name), TW_CAT(_, TW_SUFFIX))
#define TW_FN(name, variant) TW_FN1(TW_CAT(name, TW_CAT(_, variant)))

#define TW_GRID_LOOP(i, n)                                                         \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (long long)blockDim.x * gridDim.x)

__device__ __forceinline__ long long tw_offset(long long i, const TwStrided& s) {
    long long off = 0;
#pragma unroll
    for (int d = TW_MAX_DIMS - 1; d >= 0; --d) {
        if (d < s.ndim) {
            const long long c = i % s.shape[d];
            i /= s.shape[d];
            off += c * s.xs[d];
        }
    }
    return off;
}

__device__ __forceinline__ void tw_offsets(long long i, const TwBcast& s, long long& ox, long long& oy) {
    ox = 0;
    oy = 0;
#pragma unroll
    for (int d = TW_MAX_DIMS - 1; d >= 0; --d) {
        if (d < s.ndim) {
            const long long c = i % s.shape[d];
            i /= s.shape[d];
            ox += c * s.xs[d];
            oy += c * s.ys[d];
        }
    }
}

// Math by overload, so one expression serves float and double.
__device__ __forceinline__ float tw_exp(float x) { return expf(x); }
__device__ __forceinline__ double tw_exp(double x) { return exp(x); }
__device__ __forceinline__ float tw_log(float x) { return logf(x); }
__device__ __forceinline__ double tw_log(double x) { return log(x); }
__device__ __forceinline__ float tw_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double tw_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float tw_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double tw_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float tw_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double tw_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float tw_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double tw_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float tw_fabs(float x) { return fabsf(x); }
__device__ __forceinline__ double tw_fabs(double x) { return fabs(x); }
__device__ __forceinline__ float tw_floor(float x) { return floorf(x); }
__device__ __forceinline__ double tw_floor(double x) { return floor(x); }
__device__ __forceinline__ float tw_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ double tw_ceil(double x) { return ceil(x); }
__device__ __forceinline__ float tw_rint(float x) { return rintf(x); }  // half to even, as NumPy
__device__ __forceinline__ double tw_rint(double x) { return rint(x); }
__device__ __forceinline__ float tw_sin(float x) { return sinf(x); }
__device__ __forceinline__ double tw_sin(double x) { return sin(x); }
__device__ __forceinline__ float tw_cos(float x) { return cosf(x); }
__device__ __forceinline__ double tw_cos(double x) { return cos(x); }
__device__ __forceinline__ float tw_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double tw_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float tw_fmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double tw_fmod(double x, double y) { return fmod(x, y); }

// Identities of max/min: what an empty Max gives (as TF and the CPU kernels).
template <typename T> struct TwLimits;
template <> struct TwLimits<float> {
    __device__ static float lowest() { return -INFINITY; }
    __device__ static float highest() { return INFINITY; }
    __device__ static float nan() { return NAN; }
};
template <> struct TwLimits<double> {
    __device__ static double lowest() { return -(double)INFINITY; }
    __device__ static double highest() { return (double)INFINITY; }
    __device__ static double nan() { return (double)NAN; }
};
template <> struct TwLimits<int> {
    __device__ static int lowest() { return -2147483647 - 1; }
    __device__ static int highest() { return 2147483647; }
};
template <> struct TwLimits<long long> {
    __device__ static long long lowest() { return -9223372036854775807LL - 1; }
    __device__ static long long highest() { return 9223372036854775807LL; }
};

// NaN-propagating max/min (NumPy's maximum/minimum); `a != a` is false for integers.
template <typename T> __device__ __forceinline__ T tw_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T> __device__ __forceinline__ T tw_min(T a, T b) { return (a != a || a < b) ? a : b; }

// Mean's last pass scales by 1/count; every other reduction leaves values untouched (so
// integer sums never go through double).
template <typename T> __device__ __forceinline__ T tw_scale(T v, double scale) {
    return scale == 1.0 ? v : (T)((double)v * scale);
}

struct TwSumOp {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct TwMaxOp {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return tw_max(a, b); }
};

// Reduce v over the block (power-of-two blockDim); every thread gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T tw_block_reduce(T v, T* sh, Op op) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    const T r = sh[0];
    __syncthreads();  // sh is reused by the caller's next reduction
    return r;
}

#endif  // TW_COMMON_CUH
