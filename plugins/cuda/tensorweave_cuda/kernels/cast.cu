// Cast between every ordered pair of distinct dtypes: tw_cast_<src>_<dst>.
// As the CPU kernels: to bool is "nonzero", from bool gives 0/1, float to integer rounds
// toward zero (C conversion; out-of-range values saturate on the GPU where NumPy wraps).
#include "common.cuh"

#define TW_CAST(SS, ST, DS, DT, EXPR)                                                        \
    extern "C" __global__ void tw_cast_##SS##_##DS(const ST* __restrict__ x, DT* __restrict__ y, \
                                                   long long n) {                                \
        TW_GRID_LOOP(i, n) {                                                                     \
            const ST a = x[i];                                                                   \
            y[i] = (EXPR);                                                                       \
        }                                                                                        \
    }

TW_CAST(f32, float, f64, double, (double)a)
TW_CAST(f32, float, i32, int, (int)a)
TW_CAST(f32, float, i64, tw_i64, (tw_i64)a)
TW_CAST(f32, float, b8, tw_b8, (tw_b8)(a != 0))
TW_CAST(f64, double, f32, float, (float)a)
TW_CAST(f64, double, i32, int, (int)a)
TW_CAST(f64, double, i64, tw_i64, (tw_i64)a)
TW_CAST(f64, double, b8, tw_b8, (tw_b8)(a != 0))
TW_CAST(i32, int, f32, float, (float)a)
TW_CAST(i32, int, f64, double, (double)a)
TW_CAST(i32, int, i64, tw_i64, (tw_i64)a)
TW_CAST(i32, int, b8, tw_b8, (tw_b8)(a != 0))
TW_CAST(i64, tw_i64, f32, float, (float)a)
TW_CAST(i64, tw_i64, f64, double, (double)a)
TW_CAST(i64, tw_i64, i32, int, (int)a)
TW_CAST(i64, tw_i64, b8, tw_b8, (tw_b8)(a != 0))
TW_CAST(b8, tw_b8, f32, float, (float)a)
TW_CAST(b8, tw_b8, f64, double, (double)a)
TW_CAST(b8, tw_b8, i32, int, (int)a)
TW_CAST(b8, tw_b8, i64, tw_i64, (tw_i64)a)
