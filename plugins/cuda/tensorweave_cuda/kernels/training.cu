// Fused optimizer updates with TensorFlow's formulas (as the CPU kernels). The dense ones
// write new buffers instead of updating in place: a value already handed to a consumer or fetched by
// the user keeps its contents, as on the CPU. Hyperparameters are device scalars (read by
// every thread, no copy to the host).
#include "common.cuh"

template <typename T>
__device__ void tw_gd(const T* __restrict__ var, const T* __restrict__ alpha, const T* __restrict__ delta,
                      T* __restrict__ out, long long n) {
    const T a = *alpha;
    TW_GRID_LOOP(i, n) { out[i] = var[i] - a * delta[i]; }
}

template <typename T>
__device__ void tw_momentum(const T* __restrict__ var, const T* __restrict__ accum, const T* __restrict__ lr,
                            const T* __restrict__ grad, const T* __restrict__ momentum, T* __restrict__ var_out,
                            T* __restrict__ accum_out, long long n, int nesterov) {
    const T l = *lr, mo = *momentum;
    TW_GRID_LOOP(i, n) {
        const T acc = accum[i] * mo + grad[i];
        accum_out[i] = acc;
        var_out[i] = nesterov ? var[i] - (grad[i] * l + acc * mo * l) : var[i] - acc * l;
    }
}

template <typename T>
__device__ void tw_adam(const T* __restrict__ var, const T* __restrict__ m, const T* __restrict__ v,
                        const T* __restrict__ beta1_power, const T* __restrict__ beta2_power,
                        const T* __restrict__ lr, const T* __restrict__ beta1, const T* __restrict__ beta2,
                        const T* __restrict__ epsilon, const T* __restrict__ grad, T* __restrict__ var_out,
                        T* __restrict__ m_out, T* __restrict__ v_out, long long n, int nesterov) {
    const T one = (T)1, b1 = *beta1, b2 = *beta2, eps = *epsilon;
    const T alpha = *lr * tw_sqrt(one - *beta2_power) / (one - *beta1_power);
    TW_GRID_LOOP(i, n) {
        const T g = grad[i];
        const T mi = m[i] + (g - m[i]) * (one - b1);
        const T vi = v[i] + (g * g - v[i]) * (one - b2);
        m_out[i] = mi;
        v_out[i] = vi;
        const T step = nesterov ? (g * (one - b1) + b1 * mi) * alpha : mi * alpha;
        var_out[i] = var[i] - step / (tw_sqrt(vi) + eps);
    }
}

// The sparse forms (SparseApplyMomentum/Adagrad/RMSProp/Ftrl) update the rows of the
// variable and its slots in place (training.py makes them the stores' own buffers first,
// copy-on-write): one thread per (distinct row u, column c) applies that row's gradient rows
// in their order, grad[order[p]] for p in [starts[u], starts[u+1]) (starts null: the one row
// p = u; order null: order[p] = p), so a repeated index is applied twice, in order, as the
// CPU kernels and TensorFlow's do, and no two threads touch one element.
// Row u of the sparse kernels: its element `at` in the variable and slots, and the range
// [b, e) of its positions in order.
#define TW_SPARSE_ROW(i, inner)                                                                     \
    const long long u = (i) / (inner), c = (i) % (inner), at = rows[u] * (inner) + c;               \
    const long long b = starts ? starts[u] : u, e = starts ? starts[u + 1] : u + 1
#define TW_GRAD_AT(p, inner) grad[(order ? order[p] : (p)) * (inner) + c]

template <typename T>
__device__ void tw_sparse_momentum(T* __restrict__ var, T* __restrict__ accum, const T* __restrict__ lr,
                                   const T* __restrict__ grad, const T* __restrict__ momentum,
                                   const long long* __restrict__ rows, const long long* __restrict__ starts,
                                   const long long* __restrict__ order, long long n, long long inner, int nesterov) {
    const T l = *lr, mo = *momentum;
    TW_GRID_LOOP(i, n) {
        TW_SPARSE_ROW(i, inner);
        T v = var[at], acc = accum[at];
        for (long long p = b; p < e; ++p) {
            const T g = TW_GRAD_AT(p, inner);
            acc = acc * mo + g;
            v = nesterov ? v - (g * l + acc * mo * l) : v - acc * l;
        }
        var[at] = v;
        accum[at] = acc;
    }
}

template <typename T>
__device__ void tw_sparse_adagrad(T* __restrict__ var, T* __restrict__ accum, const T* __restrict__ lr,
                                  const T* __restrict__ grad, const long long* __restrict__ rows,
                                  const long long* __restrict__ starts, const long long* __restrict__ order, long long n,
                                  long long inner, int update_slots) {
    const T l = *lr;
    TW_GRID_LOOP(i, n) {
        TW_SPARSE_ROW(i, inner);
        T v = var[at], acc = accum[at];
        for (long long p = b; p < e; ++p) {
            const T g = TW_GRAD_AT(p, inner);
            if (update_slots) acc = acc + g * g;
            v = v - g * l / tw_sqrt(acc);
        }
        var[at] = v;
        accum[at] = acc;
    }
}

template <typename T>
__device__ void tw_sparse_rms_prop(T* __restrict__ var, T* __restrict__ ms, T* __restrict__ mom,
                                   const T* __restrict__ lr, const T* __restrict__ rho, const T* __restrict__ momentum,
                                   const T* __restrict__ epsilon, const T* __restrict__ grad,
                                   const long long* __restrict__ rows, const long long* __restrict__ starts,
                                   const long long* __restrict__ order, long long n, long long inner) {
    const T one = (T)1, l = *lr, r = *rho, mo = *momentum, eps = *epsilon;
    TW_GRID_LOOP(i, n) {
        TW_SPARSE_ROW(i, inner);
        T v = var[at], s = ms[at], m = mom[at];
        for (long long p = b; p < e; ++p) {
            const T g = TW_GRAD_AT(p, inner);
            s = s + (g * g - s) * (one - r);
            m = m * mo + l * g / tw_sqrt(s + eps);
            v = v - m;
        }
        var[at] = v;
        ms[at] = s;
        mom[at] = m;
    }
}

// FTRL-proximal (the op's doc and the CPU kernel): lr_power -0.5 takes square roots.
template <typename T>
__device__ void tw_sparse_ftrl(T* __restrict__ var, T* __restrict__ accum, T* __restrict__ linear,
                               const T* __restrict__ grad, const T* __restrict__ lr, const T* __restrict__ l1,
                               const T* __restrict__ l2, const T* __restrict__ lr_power,
                               const long long* __restrict__ rows, const long long* __restrict__ starts,
                               const long long* __restrict__ order, long long n, long long inner) {
    const T l = *lr, a1 = *l1, a2 = *l2, lp = *lr_power, zero = (T)0;
    const bool half = lp == (T)-0.5;
    TW_GRID_LOOP(i, n) {
        TW_SPARSE_ROW(i, inner);
        T v = var[at], acc = accum[at], lin = linear[at];
        for (long long p = b; p < e; ++p) {
            const T g = TW_GRAD_AT(p, inner);
            const T new_acc = acc + g * g;
            const T new_pow = half ? tw_sqrt(new_acc) : tw_pow(new_acc, -lp);
            const T sigma = half ? (tw_sqrt(new_acc) - tw_sqrt(acc)) / l : (new_pow - tw_pow(acc, -lp)) / l;
            lin = lin + g - sigma * v;
            const T quadratic = new_pow / l + (T)2 * a2;
            const T sign = lin > zero ? (T)1 : lin < zero ? (T)-1 : zero;
            v = tw_fabs(lin) > a1 ? (sign * a1 - lin) / quadratic : zero;
            acc = new_acc;
        }
        var[at] = v;
        accum[at] = acc;
        linear[at] = lin;
    }
}

#define TW_TRAINING_ALL(SS, ST)                                                                           \
    extern "C" __global__ void tw_apply_gradient_descent_##SS(const ST* var, const ST* alpha, const ST* delta, \
                                                              ST* out, long long n) {                     \
        tw_gd<ST>(var, alpha, delta, out, n);                                                             \
    }                                                                                                     \
    extern "C" __global__ void tw_apply_momentum_##SS(const ST* var, const ST* accum, const ST* lr,       \
                                                      const ST* grad, const ST* momentum, ST* var_out,    \
                                                      ST* accum_out, long long n, int nesterov) {         \
        tw_momentum<ST>(var, accum, lr, grad, momentum, var_out, accum_out, n, nesterov);                 \
    }                                                                                                     \
    extern "C" __global__ void tw_apply_adam_##SS(const ST* var, const ST* m, const ST* v,                \
                                                  const ST* beta1_power, const ST* beta2_power,           \
                                                  const ST* lr, const ST* beta1, const ST* beta2,         \
                                                  const ST* epsilon, const ST* grad, ST* var_out,         \
                                                  ST* m_out, ST* v_out, long long n, int nesterov) {      \
        tw_adam<ST>(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, var_out, m_out, \
                    v_out, n, nesterov);                                                                  \
    }                                                                                                     \
    extern "C" __global__ void tw_sparse_apply_momentum_##SS(ST* var, ST* accum, const ST* lr, const ST* grad, \
                                                             const ST* momentum, const long long* rows,   \
                                                             const long long* starts, const long long* order, \
                                                             long long n, long long inner, int nesterov) { \
        tw_sparse_momentum<ST>(var, accum, lr, grad, momentum, rows, starts, order, n, inner, nesterov);    \
    }                                                                                                     \
    extern "C" __global__ void tw_sparse_apply_adagrad_##SS(ST* var, ST* accum, const ST* lr, const ST* grad, \
                                                            const long long* rows, const long long* starts, \
                                                            const long long* order, long long n,          \
                                                            long long inner, int update_slots) {          \
        tw_sparse_adagrad<ST>(var, accum, lr, grad, rows, starts, order, n, inner, update_slots);          \
    }                                                                                                     \
    extern "C" __global__ void tw_sparse_apply_rms_prop_##SS(ST* var, ST* ms, ST* mom, const ST* lr,      \
                                                             const ST* rho, const ST* momentum,          \
                                                             const ST* epsilon, const ST* grad,          \
                                                             const long long* rows, const long long* starts, \
                                                             const long long* order, long long n,        \
                                                             long long inner) {                          \
        tw_sparse_rms_prop<ST>(var, ms, mom, lr, rho, momentum, epsilon, grad, rows, starts, order, n, inner); \
    }                                                                                                     \
    extern "C" __global__ void tw_sparse_apply_ftrl_##SS(ST* var, ST* accum, ST* linear, const ST* grad,  \
                                                         const ST* lr, const ST* l1, const ST* l2,        \
                                                         const ST* lr_power, const long long* rows,       \
                                                         const long long* starts, const long long* order, \
                                                         long long n, long long inner) {                  \
        tw_sparse_ftrl<ST>(var, accum, linear, grad, lr, l1, l2, lr_power, rows, starts, order, n, inner);  \
    }

TW_TRAINING_ALL(f32, float)
TW_TRAINING_ALL(f64, double)
