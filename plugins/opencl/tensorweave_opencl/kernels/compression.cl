// The conversions of lossy transfer compression (whitepaper 5.5): float32 <-> its upper 16
// bits (bfloat16 by truncation), carried as ushort. Both read and write the float32 side as
// uint: pure bit manipulation, so no float load, store or comparison (flush-to-zero of
// subnormals, NaN canonicalisation on some devices) can change a bit, and the results equal
// the CPU kernels' bit for bit.

// A NaN whose payload sits only in the low 16 bits would truncate to infinity: every NaN
// becomes the quiet NaN 0x7FC0, as the CPU kernel does.
__kernel void compress_f32_bf16(__global ushort* out, __global const uint* x, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        const uint a = x[i];
        out[i] = (a & 0x7FFFFFFFu) > 0x7F800000u ? (ushort)0x7FC0 : (ushort)(a >> 16);
    }
}

__kernel void decompress_bf16_f32(__global uint* out, __global const ushort* x, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        out[i] = (uint)x[i] << 16;
    }
}
