// Element-wise kernels for float32 tensors, the first ones the CUDA device will load with
// PyCUDA's SourceModule. extern "C" keeps the names unmangled so they can be looked up by
// name (module.get_function("tw_add_f32")). Grid-stride loops let one launch size fit any n.

extern "C" __global__ void tw_add_f32(const float* __restrict__ x, const float* __restrict__ y,
                                      float* __restrict__ z, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        z[i] = x[i] + y[i];
    }
}

extern "C" __global__ void tw_relu_f32(const float* __restrict__ x, float* __restrict__ y,
                                       long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        y[i] = fmaxf(x[i], 0.0f);
    }
}
