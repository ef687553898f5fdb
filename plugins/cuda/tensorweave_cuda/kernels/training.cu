// Fused optimizer updates with TensorFlow's formulas (as the CPU kernels). Each writes new
// buffers instead of updating in place: a value already handed to a consumer or fetched by
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
    }

TW_TRAINING_ALL(f32, float)
TW_TRAINING_ALL(f64, double)
