// Lets the plugin's CUDA C compile as C++ for the CPU emulator (emulator.py): the kernels
// run unchanged, one OpenMP thread per CUDA thread of a block, blocks one after another.
// __shared__ becomes a function-static array (one block runs at a time), __syncthreads()
// an OpenMP barrier of the block's team. Tests only: nothing here is fast.
#include <math.h>
#include <omp.h>

struct dim3 {
    unsigned x, y, z;
};
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() _Pragma("omp barrier")
