// The conversions of lossy transfer compression (whitepaper 5.5): float32 <-> its upper 16
// bits (bfloat16 by truncation), carried as uint16. The float32 side is read and written as
// unsigned int: pure bit manipulation, so no float load, store or comparison (flush-to-zero
// of subnormals under -ftz, NaN canonicalisation) can change a bit, and the results equal
// the CPU kernels' bit for bit.
#include "common.cuh"

// A NaN whose payload sits only in the low 16 bits would truncate to infinity: every NaN
// becomes the quiet NaN 0x7FC0, as the CPU kernel does.
extern "C" __global__ void tw_compress_f32_bf16(const unsigned int* __restrict__ x, tw_u16* __restrict__ y,
                                                long long n) {
    TW_GRID_LOOP(i, n) {
        const unsigned int a = x[i];
        y[i] = (a & 0x7FFFFFFFu) > 0x7F800000u ? (tw_u16)0x7FC0u : (tw_u16)(a >> 16);
    }
}

extern "C" __global__ void tw_decompress_bf16_f32(const tw_u16* __restrict__ x, unsigned int* __restrict__ y,
                                                  long long n) {
    TW_GRID_LOOP(i, n) {
        y[i] = (unsigned int)x[i] << 16;
    }
}
