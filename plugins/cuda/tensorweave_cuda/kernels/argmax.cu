// ArgMax/ArgMin over the middle axis of an [outer, r, inner] view, a thread per output:
// tw_argmax_<T>_<index type>. The first extreme wins; a NaN counts as the extreme (NumPy).
// r >= 1 (the caller rejects empty axes).
#include "common.cuh"

#define TW_ARG(KIND, CMP, SS, ST, IS, IT)                                                         \
    extern "C" __global__ void tw_##KIND##_##SS##_##IS(const ST* __restrict__ x, IT* __restrict__ out, \
                                                       long long outer, long long r, long long inner) { \
        TW_GRID_LOOP(k, outer * inner) {                                                          \
            const ST* p = x + (k / inner) * r * inner + (k % inner);                              \
            ST best = p[0];                                                                       \
            long long bi = 0;                                                                     \
            for (long long j = 1; j < r && best == best; ++j) {                                   \
                const ST v = p[j * inner];                                                        \
                if (v != v || v CMP best) {                                                       \
                    best = v;                                                                     \
                    bi = j;                                                                       \
                }                                                                                 \
            }                                                                                     \
            out[k] = (IT)bi;                                                                      \
        }                                                                                         \
    }

#define TW_ARG_ALL(SS, ST)                    \
    TW_ARG(argmax, >, SS, ST, i32, int)       \
    TW_ARG(argmax, >, SS, ST, i64, tw_i64)    \
    TW_ARG(argmin, <, SS, ST, i32, int)       \
    TW_ARG(argmin, <, SS, ST, i64, tw_i64)

TW_ARG_ALL(f32, float)
TW_ARG_ALL(f64, double)
TW_ARG_ALL(i32, int)
TW_ARG_ALL(i64, tw_i64)
