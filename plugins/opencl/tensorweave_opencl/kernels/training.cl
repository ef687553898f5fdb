// Fused optimizer updates with TensorFlow's formulas. Each writes fresh buffers (new_*):
// values already handed to other kernels keep theirs. Hyper-parameters are device scalars
// (element 0). T: element type; NESTEROV 0 or 1.

#ifndef NESTEROV
#define NESTEROV 0
#endif

__kernel void gradient_descent(__global T* new_var, __global const T* var, __global const T* alpha,
                               __global const T* delta, const int n)
{
    int i = get_global_id(0);
    if (i < n) new_var[i] = var[i] - alpha[0] * delta[i];
}

__kernel void momentum(__global T* new_var, __global T* new_accum, __global const T* var,
                       __global const T* accum, __global const T* lr, __global const T* grad,
                       __global const T* momentum, const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const T g = grad[i];
    const T a = accum[i] * momentum[0] + g;
    new_accum[i] = a;
#if NESTEROV
    new_var[i] = var[i] - (g * lr[0] + a * momentum[0] * lr[0]);
#else
    new_var[i] = var[i] - a * lr[0];
#endif
}

__kernel void adagrad(__global T* new_var, __global T* new_accum, __global const T* var,
                      __global const T* accum, __global const T* lr, __global const T* grad, const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const T g = grad[i];
    const T a = accum[i] + g * g;
    new_accum[i] = a;
    new_var[i] = var[i] - g * lr[0] / sqrt(a);
}

__kernel void adam(__global T* new_var, __global T* new_m, __global T* new_v, __global const T* var,
                   __global const T* m, __global const T* v, __global const T* beta1_power,
                   __global const T* beta2_power, __global const T* lr, __global const T* beta1,
                   __global const T* beta2, __global const T* epsilon, __global const T* grad, const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const T one = 1;
    const T alpha = lr[0] * sqrt(one - beta2_power[0]) / (one - beta1_power[0]);
    const T g = grad[i];
    const T mi = m[i] + (g - m[i]) * (one - beta1[0]);
    const T vi = v[i] + (g * g - v[i]) * (one - beta2[0]);
    new_m[i] = mi;
    new_v[i] = vi;
#if NESTEROV
    new_var[i] = var[i] - ((g * (one - beta1[0]) + beta1[0] * mi) * alpha) / (sqrt(vi) + epsilon[0]);
#else
    new_var[i] = var[i] - (mi * alpha) / (sqrt(vi) + epsilon[0]);
#endif
}

__kernel void rms_prop(__global T* new_var, __global T* new_ms, __global T* new_mom, __global const T* var,
                       __global const T* ms, __global const T* mom, __global const T* lr,
                       __global const T* rho, __global const T* momentum, __global const T* epsilon,
                       __global const T* grad, const int n)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const T one = 1;
    const T g = grad[i];
    const T s = ms[i] + (g * g - ms[i]) * (one - rho[0]);
    const T mo = mom[i] * momentum[0] + lr[0] * g / sqrt(s + epsilon[0]);
    new_ms[i] = s;
    new_mom[i] = mo;
    new_var[i] = var[i] - mo;
}
