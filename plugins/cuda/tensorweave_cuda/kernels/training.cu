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
//
// tw_sparse_rows does that walk for the S tensors `refs` (the variable, then its slots): each
// thread loads its element of each into s[0..S), calls step(s, g) for each gradient value g
// of its row in order, and stores them back. A step is one optimizer's update of one element.
template <typename T, int S, typename Step>
__device__ void tw_sparse_rows(T* const* refs, const T* __restrict__ grad, const long long* __restrict__ rows,
                               const long long* __restrict__ starts, const long long* __restrict__ order, long long n,
                               long long inner, const Step& step) {
    TW_GRID_LOOP(i, n) {
        const long long u = i / inner, c = i % inner, at = rows[u] * inner + c;
        const long long b = starts ? starts[u] : u, e = starts ? starts[u + 1] : u + 1;
        T s[S];
        for (int k = 0; k < S; ++k) s[k] = refs[k][at];
        for (long long p = b; p < e; ++p) step(s, grad[(order ? order[p] : p) * inner + c]);
        for (int k = 0; k < S; ++k) refs[k][at] = s[k];
    }
}

template <typename T>
struct TwSparseMomentum {  // s: var, accum
    T l, mo;
    int nesterov;
    __device__ void operator()(T* s, T g) const {
        T &v = s[0], &acc = s[1];
        acc = acc * mo + g;
        v = nesterov ? v - (g * l + acc * mo * l) : v - acc * l;
    }
};

template <typename T>
struct TwSparseAdagrad {  // s: var, accum
    T l;
    int update_slots;
    __device__ void operator()(T* s, T g) const {
        T &v = s[0], &acc = s[1];
        if (update_slots) acc = acc + g * g;
        v = v - g * l / tw_sqrt(acc);
    }
};

template <typename T>
struct TwSparseRmsProp {  // s: var, ms, mom
    T l, r, mo, eps;
    __device__ void operator()(T* s, T g) const {
        T &v = s[0], &ms = s[1], &m = s[2];
        ms = ms + (g * g - ms) * ((T)1 - r);
        m = m * mo + l * g / tw_sqrt(ms + eps);
        v = v - m;
    }
};

// FTRL-proximal (the op's doc and the CPU kernel): lr_power -0.5 takes square roots.
template <typename T>
struct TwSparseFtrl {  // s: var, accum, linear
    T l, a1, a2, lp;
    __device__ void operator()(T* s, T g) const {
        T &v = s[0], &acc = s[1], &lin = s[2];
        const T zero = (T)0;
        const bool half = lp == (T)-0.5;
        const T new_acc = acc + g * g;
        const T new_pow = half ? tw_sqrt(new_acc) : tw_pow(new_acc, -lp);
        const T sigma = half ? (tw_sqrt(new_acc) - tw_sqrt(acc)) / l : (new_pow - tw_pow(acc, -lp)) / l;
        lin = lin + g - sigma * v;
        const T quadratic = new_pow / l + (T)2 * a2;
        const T sign = lin > zero ? (T)1 : lin < zero ? (T)-1 : zero;
        v = tw_fabs(lin) > a1 ? (sign * a1 - lin) / quadratic : zero;
        acc = new_acc;
    }
};

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
        ST* refs[2] = {var, accum};                                                                       \
        tw_sparse_rows<ST, 2>(refs, grad, rows, starts, order, n, inner,                                  \
                              TwSparseMomentum<ST>{*lr, *momentum, nesterov});                            \
    }                                                                                                     \
    extern "C" __global__ void tw_sparse_apply_adagrad_##SS(ST* var, ST* accum, const ST* lr, const ST* grad, \
                                                            const long long* rows, const long long* starts, \
                                                            const long long* order, long long n,          \
                                                            long long inner, int update_slots) {          \
        ST* refs[2] = {var, accum};                                                                       \
        tw_sparse_rows<ST, 2>(refs, grad, rows, starts, order, n, inner, TwSparseAdagrad<ST>{*lr, update_slots}); \
    }                                                                                                     \
    extern "C" __global__ void tw_sparse_apply_rms_prop_##SS(ST* var, ST* ms, ST* mom, const ST* lr,      \
                                                             const ST* rho, const ST* momentum,          \
                                                             const ST* epsilon, const ST* grad,          \
                                                             const long long* rows, const long long* starts, \
                                                             const long long* order, long long n,        \
                                                             long long inner) {                          \
        ST* refs[3] = {var, ms, mom};                                                                     \
        tw_sparse_rows<ST, 3>(refs, grad, rows, starts, order, n, inner,                                  \
                              TwSparseRmsProp<ST>{*lr, *rho, *momentum, *epsilon});                       \
    }                                                                                                     \
    extern "C" __global__ void tw_sparse_apply_ftrl_##SS(ST* var, ST* accum, ST* linear, const ST* grad,  \
                                                         const ST* lr, const ST* l1, const ST* l2,        \
                                                         const ST* lr_power, const long long* rows,       \
                                                         const long long* starts, const long long* order, \
                                                         long long n, long long inner) {                  \
        ST* refs[3] = {var, accum, linear};                                                               \
        tw_sparse_rows<ST, 3>(refs, grad, rows, starts, order, n, inner,                                  \
                              TwSparseFtrl<ST>{*lr, *l1, *l2, *lr_power});                                \
    }

TW_TRAINING_ALL(f32, float)
TW_TRAINING_ALL(f64, double)
