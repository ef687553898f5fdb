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

// ---------------------------------------------------------------------------------------
// The sparse forms (SparseApply*): var and its slots updated IN PLACE at the rows the host
// grouped (kernels/scatter.py, row_groups: g = [rows[m], off[m + 1], order[n]]). One work
// item per (distinct row, column) applies that row's gradient slices in their order, so a
// repeated index is applied twice, one after the other, as TensorFlow's kernels do; no
// other row is read or written.
#define SPARSE_ITEM                                             \
    int i = get_global_id(0);                                   \
    if (i >= n) return;                                         \
    const int r = i / inner;                                    \
    const int k = i - r * inner;                                \
    __global const int* off = g + m;                            \
    __global const int* order = g + 2 * m + 1;                  \
    const long t = (long)g[r] * inner + k;
#define GRAD(p) grad[(long)order[p] * inner + k]

#ifndef UPDATE_SLOTS
#define UPDATE_SLOTS 1
#endif

__kernel void sparse_momentum(__global T* var, __global T* accum, __global const T* lr,
                              __global const T* grad, __global const T* momentum,
                              __global const int* g, const int m, const int inner, const int n)
{
    SPARSE_ITEM
    T v = var[t], a = accum[t];
    for (int p = off[r]; p < off[r + 1]; ++p) {
        const T gr = GRAD(p);
        a = a * momentum[0] + gr;
#if NESTEROV
        v = v - (gr * lr[0] + a * momentum[0] * lr[0]);
#else
        v = v - a * lr[0];
#endif
    }
    var[t] = v;
    accum[t] = a;
}

__kernel void sparse_adagrad(__global T* var, __global T* accum, __global const T* lr,
                             __global const T* grad, __global const int* g, const int m, const int inner,
                             const int n)
{
    SPARSE_ITEM
    T v = var[t], a = accum[t];
    for (int p = off[r]; p < off[r + 1]; ++p) {
        const T gr = GRAD(p);
#if UPDATE_SLOTS
        a = a + gr * gr;
#endif
        v = v - gr * lr[0] / sqrt(a);
    }
    var[t] = v;
    accum[t] = a;
}

__kernel void sparse_rms_prop(__global T* var, __global T* ms, __global T* mom, __global const T* lr,
                              __global const T* rho, __global const T* momentum, __global const T* epsilon,
                              __global const T* grad, __global const int* g, const int m, const int inner,
                              const int n)
{
    SPARSE_ITEM
    const T one = 1;
    T v = var[t], s = ms[t], mo = mom[t];
    for (int p = off[r]; p < off[r + 1]; ++p) {
        const T gr = GRAD(p);
        s = s + (gr * gr - s) * (one - rho[0]);
        mo = mo * momentum[0] + lr[0] * gr / sqrt(s + epsilon[0]);
        v = v - mo;
    }
    var[t] = v;
    ms[t] = s;
    mom[t] = mo;
}

// FTRL-proximal (TensorFlow's ApplyFtrl formula; lr_power -0.5 takes square roots).
__kernel void sparse_ftrl(__global T* var, __global T* accum, __global T* linear, __global const T* grad,
                          __global const T* lr, __global const T* l1, __global const T* l2,
                          __global const T* lr_power, __global const int* g, const int m, const int inner,
                          const int n)
{
    SPARSE_ITEM
    const T minus_half = (T)-0.5;
    const T lp = lr_power[0];
    T v = var[t], a = accum[t], li = linear[t];
    for (int p = off[r]; p < off[r + 1]; ++p) {
        const T gr = GRAD(p);
        const T na = a + gr * gr;
        T new_pow, sigma;
        if (lp == minus_half) {
            new_pow = sqrt(na);
            sigma = (new_pow - sqrt(a)) / lr[0];
        } else {
            new_pow = pow(na, -lp);
            sigma = (new_pow - pow(a, -lp)) / lr[0];
        }
        li = li + gr - sigma * v;
        const T quadratic = new_pow / lr[0] + (T)2 * l2[0];
        const T sgn = li > (T)0 ? (T)1 : (li < (T)0 ? (T)-1 : (T)0);
        v = fabs(li) > l1[0] ? (sgn * l1[0] - li) / quadratic : (T)0;
        a = na;
    }
    var[t] = v;
    accum[t] = a;
    linear[t] = li;
}
