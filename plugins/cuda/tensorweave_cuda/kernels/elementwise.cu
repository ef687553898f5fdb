// Element-wise kernels for one dtype, chosen at compile time:
//   TW_T       the element type (float, double, int, tw_i64, tw_b8)
//   TW_SUFFIX  its suffix in kernel names (f32, f64, i32, i64, b8)
//   TW_KIND    1 float, 2 integer, 3 bool
// catalog.py lists exactly which functions exist for which kind; the PTX test checks it.
// Semantics follow the CPU (NumPy) kernels: NaN propagates through max/min/relu/sign,
// integer division truncates (Div) or floors (FloorDiv); integer division by zero gives 0
// here (the GPU cannot raise; the CPU kernels report an error).
#include "common.cuh"

typedef TW_T T;

#define TW_UNARY(name, expr)                                                                        \
    extern "C" __global__ void TW_FN(name, flat)(const T* __restrict__ x, T* __restrict__ y, long long n) { \
        TW_GRID_LOOP(i, n) {                                                                        \
            const T a = x[i];                                                                       \
            y[i] = (expr);                                                                          \
        }                                                                                           \
    }

// Binary kernels come in two variants: flat (operands of the output's shape) and bcast
// (NumPy broadcasting, strides per merged output dimension in a TwBcast).
#define TW_BINARY_OUT(name, OUT, expr)                                                              \
    extern "C" __global__ void TW_FN(name, flat)(const T* __restrict__ x, const T* __restrict__ y,  \
                                                 OUT* __restrict__ z, long long n) {                \
        TW_GRID_LOOP(i, n) {                                                                        \
            const T a = x[i], b = y[i];                                                             \
            z[i] = (expr);                                                                          \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void TW_FN(name, bcast)(const T* __restrict__ x, const T* __restrict__ y, \
                                                  OUT* __restrict__ z, long long n, TwBcast s) {    \
        TW_GRID_LOOP(i, n) {                                                                        \
            long long ox, oy;                                                                       \
            tw_offsets(i, s, ox, oy);                                                               \
            const T a = x[ox], b = y[oy];                                                           \
            z[i] = (expr);                                                                          \
        }                                                                                           \
    }
#define TW_BINARY(name, expr) TW_BINARY_OUT(name, T, expr)
#define TW_COMPARE(name, expr) TW_BINARY_OUT(name, tw_b8, (tw_b8)(expr))

#define TW_ZERO ((T)0)
#define TW_ONE ((T)1)

#if TW_KIND == 1  // float and double
TW_UNARY(neg, -a)
TW_UNARY(abs, tw_fabs(a))
TW_UNARY(square, a * a)
TW_UNARY(sign, a != a ? a : (T)((a > TW_ZERO) - (a < TW_ZERO)))
TW_UNARY(relu, (a > TW_ZERO || a != a) ? a : TW_ZERO)
TW_UNARY(relu6, a != a ? a : (a < TW_ZERO ? TW_ZERO : (a > (T)6 ? (T)6 : a)))
TW_UNARY(sqrt, tw_sqrt(a))
TW_UNARY(rsqrt, TW_ONE / tw_sqrt(a))
TW_UNARY(exp, tw_exp(a))
TW_UNARY(log, tw_log(a))
TW_UNARY(log1p, tw_log1p(a))
TW_UNARY(expm1, tw_expm1(a))
TW_UNARY(tanh, tw_tanh(a))
TW_UNARY(sigmoid, (T)0.5 * (tw_tanh((T)0.5 * a) + TW_ONE))
TW_UNARY(elu, a < TW_ZERO ? tw_expm1(a) : a)
// log(exp(a) + 1) without overflow: max(a, 0) + log1p(exp(-|a|))
TW_UNARY(softplus, (a > TW_ZERO ? a : TW_ZERO) + tw_log1p(tw_exp(-tw_fabs(a))))
TW_UNARY(reciprocal, TW_ONE / a)
TW_UNARY(floor, tw_floor(a))
TW_UNARY(ceil, tw_ceil(a))
TW_UNARY(round, tw_rint(a))
TW_UNARY(sin, tw_sin(a))
TW_UNARY(cos, tw_cos(a))

TW_BINARY(add, a + b)
TW_BINARY(sub, a - b)
TW_BINARY(mul, a * b)
TW_BINARY(maximum, tw_max(a, b))
TW_BINARY(minimum, tw_min(a, b))
TW_BINARY(squared_difference, (a - b) * (a - b))
TW_BINARY(div, a / b)
TW_BINARY(floordiv, tw_floor(a / b))
// NumPy's float mod: the sign of the divisor
__device__ __forceinline__ T tw_floormod(T a, T b) {
    T r = tw_fmod(a, b);
    if (r != TW_ZERO && ((r < TW_ZERO) != (b < TW_ZERO))) r += b;
    return r;
}
TW_BINARY(floormod, tw_floormod(a, b))
TW_BINARY(relu_grad, a * (T)(b > TW_ZERO))
TW_BINARY(relu6_grad, a * (T)(b > TW_ZERO && b < (T)6))
TW_BINARY(pow, tw_pow(a, b))
// d elu/dx given the output y: y + 1 where y < 0, else 1
TW_BINARY(elu_grad, a * (((b < TW_ZERO || b != b) ? b : TW_ZERO) + TW_ONE))
TW_BINARY(softplus_grad, a * ((T)0.5 * (tw_tanh((T)0.5 * b) + TW_ONE)))
#endif

#if TW_KIND == 2  // integers
TW_UNARY(neg, -a)
TW_UNARY(abs, a < TW_ZERO ? -a : a)
TW_UNARY(square, a * a)
TW_UNARY(sign, (T)((a > TW_ZERO) - (a < TW_ZERO)))
TW_UNARY(relu, a > TW_ZERO ? a : TW_ZERO)
TW_UNARY(relu6, a < TW_ZERO ? TW_ZERO : (a > (T)6 ? (T)6 : a))

TW_BINARY(add, a + b)
TW_BINARY(sub, a - b)
TW_BINARY(mul, a * b)
TW_BINARY(maximum, a > b ? a : b)
TW_BINARY(minimum, a < b ? a : b)
TW_BINARY(squared_difference, (a - b) * (a - b))
TW_BINARY(div, b == TW_ZERO ? TW_ZERO : a / b)
__device__ __forceinline__ T tw_floordiv(T a, T b) {
    if (b == TW_ZERO) return TW_ZERO;
    T q = a / b;
    if (a % b != TW_ZERO && ((a < TW_ZERO) != (b < TW_ZERO))) q -= TW_ONE;
    return q;
}
__device__ __forceinline__ T tw_floormod(T a, T b) {
    if (b == TW_ZERO) return TW_ZERO;
    T r = a % b;
    if (r != TW_ZERO && ((r < TW_ZERO) != (b < TW_ZERO))) r += b;
    return r;
}
TW_BINARY(floordiv, tw_floordiv(a, b))
TW_BINARY(floormod, tw_floormod(a, b))
TW_BINARY(relu_grad, a * (T)(b > TW_ZERO))
TW_BINARY(relu6_grad, a * (T)(b > TW_ZERO && b < (T)6))
#endif

#if TW_KIND == 3  // bool (one byte, 0 or 1)
TW_UNARY(logical_not, (T)(a == 0))
TW_BINARY(logical_and, (T)(a != 0 && b != 0))
TW_BINARY(logical_or, (T)(a != 0 || b != 0))
#endif

// Comparisons, every dtype; the output is bool.
TW_COMPARE(equal, a == b)
TW_COMPARE(not_equal, a != b)
TW_COMPARE(less, a < b)
TW_COMPARE(less_equal, a <= b)
TW_COMPARE(greater, a > b)
TW_COMPARE(greater_equal, a >= b)

// y[i] = x at the offset of output index i (BroadcastTo, Transpose, ...).
extern "C" __global__ void TW_FN1(copy_strided)(const T* __restrict__ x, T* __restrict__ y, long long n,
                                                TwStrided s) {
    TW_GRID_LOOP(i, n) { y[i] = x[tw_offset(i, s)]; }
}

extern "C" __global__ void TW_FN1(fill)(T* __restrict__ y, long long n, T value) {
    TW_GRID_LOOP(i, n) { y[i] = value; }
}

// Fill with a value that lives on the device (a scalar tensor): no copy to the host.
extern "C" __global__ void TW_FN1(fill_from)(T* __restrict__ y, const T* __restrict__ value, long long n) {
    const T v = *value;
    TW_GRID_LOOP(i, n) { y[i] = v; }
}

#if TW_KIND != 3
// value + bias along the channel dimension: bias index (i / inner) % channels, where
// inner = 1 for NHWC and the spatial size for NCHW.
extern "C" __global__ void TW_FN1(bias_add)(const T* __restrict__ x, const T* __restrict__ bias,
                                            T* __restrict__ y, long long n, long long channels, long long inner) {
    TW_GRID_LOOP(i, n) { y[i] = x[i] + bias[(i / inner) % channels]; }
}
#endif
