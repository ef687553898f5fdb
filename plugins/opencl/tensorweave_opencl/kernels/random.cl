// Random numbers from Philox4x32-10, the streams of tensorweave.kernels.random (its docstring
// is the specification; the CPU kernels compute it with NumPy, cuda's random.cu as here): key =
// the op's seed, counter words 2-3 = seed2, words 0-1 = the 64-bit block number offset + t.
// Work item t computes block t of the run, so the values do not depend on the launch geometry.
//
// Built with T (the output type) and one of TW_FLOAT, TW_DOUBLE, TW_INT32, TW_INT64.
// Uniform floats are exact (bit-identical to the CPU's); normals go through log/cos/sin/sqrt
// and agree to float rounding.

typedef struct { uint v[4]; } tw_philox_t;

inline tw_philox_t tw_philox(ulong key, ulong stream, ulong block)
{
    uint c0 = (uint)block, c1 = (uint)(block >> 32);
    uint c2 = (uint)stream, c3 = (uint)(stream >> 32);
    uint k0 = (uint)key, k1 = (uint)(key >> 32);
    for (int r = 0; r < 10; ++r) {
        if (r) {  // the Weyl sequence of round keys
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        const uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    tw_philox_t out = {{c0, c1, c2, c3}};
    return out;
}

#if defined(TW_FLOAT) || defined(TW_DOUBLE)

#ifdef TW_DOUBLE
#define PER 2
// 53 bits of the words (a, b) times 2^-53: [0, 1); open0: (0, 1].
inline double tw_unit(uint a, uint b) { return (double)((((ulong)a << 32) | b) >> 11) * 1.1102230246251565e-16; }
inline double tw_unit_open0(uint a, uint b)
{
    return (double)(((((ulong)a << 32) | b) >> 11) + 1) * 1.1102230246251565e-16;
}
inline void tw_uniform(const tw_philox_t p, T* v)
{
    v[0] = tw_unit(p.v[0], p.v[1]);
    v[1] = tw_unit(p.v[2], p.v[3]);
}
#define TW_TWO_PI 6.283185307179586476925
#else
#define PER 4
inline float tw_unit(uint u) { return (float)(u >> 8) * 5.9604644775390625e-8f; }
inline float tw_unit_open0(uint u) { return (float)((u >> 8) + 1) * 5.9604644775390625e-8f; }
inline void tw_uniform(const tw_philox_t p, T* v)
{
    for (int k = 0; k < 4; ++k) v[k] = tw_unit(p.v[k]);
}
#define TW_TWO_PI 6.283185307179586476925f
#endif

inline void tw_box_muller(T u1, T u2, T* z)
{
    // Separate products (no a*b+c for the compiler to fuse): the CPU's NumPy rounds each.
    const T m = log(u1) * (T)-2;
    const T r = sqrt(m);
    const T theta = (T)TW_TWO_PI * u2;
    const T c = cos(theta), s = sin(theta);
    z[0] = r * c;
    z[1] = r * s;
}

inline void tw_normal(const tw_philox_t p, T* v)
{
#ifdef TW_DOUBLE
    tw_box_muller(tw_unit_open0(p.v[0], p.v[1]), tw_unit(p.v[2], p.v[3]), v);
#else
    tw_box_muller(tw_unit_open0(p.v[0]), tw_unit(p.v[1]), v);
    tw_box_muller(tw_unit_open0(p.v[2]), tw_unit(p.v[3]), v + 2);
#endif
}

__kernel void random_uniform(__global T* out, const long n, const ulong key, const ulong stream, const ulong offset)
{
    const long t = get_global_id(0);
    const long blocks = (n + PER - 1) / PER;
    if (t >= blocks) return;
    T v[PER];
    tw_uniform(tw_philox(key, stream, offset + (ulong)t), v);
    for (int k = 0; k < PER; ++k)
        if (t * PER + k < n) out[t * PER + k] = v[k];
}

__kernel void random_normal(__global T* out, const long n, const ulong key, const ulong stream, const ulong offset)
{
    const long t = get_global_id(0);
    const long blocks = (n + PER - 1) / PER;
    if (t >= blocks) return;
    T v[PER];
    tw_normal(tw_philox(key, stream, offset + (ulong)t), v);
    for (int k = 0; k < PER; ++k)
        if (t * PER + k < n) out[t * PER + k] = v[k];
}

// Block t's values: the normals of blocks offset + round * blocks + t, round < TW_TRUNC_ROUNDS,
// in order, those with |z| > 2 dropped; a slot still empty after the last round is 0.
__kernel void random_truncated_normal(__global T* out, const long n, const ulong key, const ulong stream,
                                      const ulong offset)
{
    const long t = get_global_id(0);
    const long blocks = (n + PER - 1) / PER;
    if (t >= blocks) return;
    int filled = 0;
    for (int round = 0; round < TW_TRUNC_ROUNDS && filled < PER; ++round) {
        T v[PER];
        tw_normal(tw_philox(key, stream, offset + (ulong)round * (ulong)blocks + (ulong)t), v);
        for (int k = 0; k < PER && filled < PER; ++k) {
            if (fabs(v[k]) <= (T)2) {
                if (t * PER + filled < n) out[t * PER + filled] = v[k];
                ++filled;
            }
        }
    }
    for (; filled < PER; ++filled)
        if (t * PER + filled < n) out[t * PER + filled] = (T)0;
}

#endif

#ifdef TW_INT32
// minval + bits % range, 32 bits per value.
__kernel void random_uniform_int(__global int* out, const long n, const ulong key, const ulong stream,
                                 const ulong offset, const long lo, const ulong range)
{
    const long t = get_global_id(0);
    if (t >= (n + 3) / 4) return;
    const tw_philox_t p = tw_philox(key, stream, offset + (ulong)t);
    for (int k = 0; k < 4; ++k)
        if (t * 4 + k < n) out[t * 4 + k] = (int)(lo + (long)((ulong)p.v[k] % range));
}
#endif

#ifdef TW_INT64
// minval + bits % range, 64 bits per value, in unsigned arithmetic (mod 2^64).
__kernel void random_uniform_int(__global long* out, const long n, const ulong key, const ulong stream,
                                 const ulong offset, const long lo, const ulong range)
{
    const long t = get_global_id(0);
    if (t >= (n + 1) / 2) return;
    const tw_philox_t p = tw_philox(key, stream, offset + (ulong)t);
    for (int k = 0; k < 2; ++k) {
        const ulong bits = ((ulong)p.v[2 * k] << 32) | p.v[2 * k + 1];
        if (t * 2 + k < n) out[t * 2 + k] = (long)((ulong)lo + bits % range);
    }
}
#endif
