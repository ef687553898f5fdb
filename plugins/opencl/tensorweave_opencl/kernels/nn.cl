// Softmax and the softmax cross-entropies, one work item per row of a [rows, cols] matrix
// (rows are examples, cols classes: few enough that a row loop beats a work-group tree).
// Max-shifted, so no exp overflows. Defines: T element type; LOG 1 for LogSoftmax;
// TL label type of the sparse cross-entropy.

#ifndef LOG
#define LOG 0
#endif
#ifndef TL
#define TL int
#endif

inline T row_max(__global const T* x, const int cols)
{
    T m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = (x[c] > m || isnan(x[c])) ? x[c] : m;
    return m;
}

__kernel void softmax(__global T* out, __global const T* x, const int rows, const int cols)
{
    int r = get_global_id(0);
    if (r >= rows) return;
    __global const T* xr = x + (long)r * cols;
    __global T* o = out + (long)r * cols;
    const T m = row_max(xr, cols);
    T s = 0;
    for (int c = 0; c < cols; ++c) s += exp(xr[c] - m);
#if LOG
    const T ls = log(s);
    for (int c = 0; c < cols; ++c) o[c] = xr[c] - m - ls;
#else
    for (int c = 0; c < cols; ++c) o[c] = exp(xr[c] - m) / s;
#endif
}

// loss[r] = sum_c labels * (log(sum exp(s)) - s), backprop = softmax - labels, s = x - max.
__kernel void xent(__global T* loss, __global T* backprop, __global const T* x, __global const T* labels,
                   const int rows, const int cols)
{
    int r = get_global_id(0);
    if (r >= rows) return;
    __global const T* xr = x + (long)r * cols;
    __global const T* lr = labels + (long)r * cols;
    __global T* br = backprop + (long)r * cols;
    const T m = row_max(xr, cols);
    T s = 0;
    for (int c = 0; c < cols; ++c) s += exp(xr[c] - m);
    const T ls = log(s);
    T l = 0;
    for (int c = 0; c < cols; ++c) {
        const T sh = xr[c] - m;
        l += lr[c] * (ls - sh);
        br[c] = exp(sh) / s - lr[c];
    }
    loss[r] = l;
}

// As xent with one-hot labels given as class indices. A label outside [0, cols) gives NaN
// loss and backprop for its row (as TensorFlow's GPU kernel does; a kernel cannot raise).
__kernel void sparse_xent(__global T* loss, __global T* backprop, __global const T* x, __global const TL* labels,
                          const int rows, const int cols)
{
    int r = get_global_id(0);
    if (r >= rows) return;
    __global const T* xr = x + (long)r * cols;
    __global T* br = backprop + (long)r * cols;
    const TL label = labels[r];
    if (label < 0 || label >= cols) {
        loss[r] = NAN;
        for (int c = 0; c < cols; ++c) br[c] = NAN;
        return;
    }
    const T m = row_max(xr, cols);
    T s = 0;
    for (int c = 0; c < cols; ++c) s += exp(xr[c] - m);
    for (int c = 0; c < cols; ++c) br[c] = exp(xr[c] - m) / s;
    br[label] -= (T)1;
    loss[r] = log(s) - (xr[label] - m);
}

// InTopK: is the target's prediction among the k largest of its row? A target outside
// [0, cols) or a non-finite prediction is never in the top k. Predictions are float.
__kernel void in_top_k(__global uchar* out, __global const float* pred, __global const TL* targets,
                       const int rows, const int cols, const int k)
{
    int r = get_global_id(0);
    if (r >= rows) return;
    const TL t = targets[r];
    if (t < 0 || t >= cols) { out[r] = 0; return; }
    __global const float* pr = pred + (long)r * cols;
    const float p = pr[t];
    if (!isfinite(p)) { out[r] = 0; return; }
    int larger = 0;
    for (int c = 0; c < cols; ++c) larger += pr[c] > p;
    out[r] = larger < k;
}
