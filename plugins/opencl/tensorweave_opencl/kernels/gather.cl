// Gathers and their gradient. T element type, TI index type.

#ifndef COMBINE
#define COMBINE(a, v) ((a) + (v))
#endif
#ifndef INIT
#define INIT 0
#endif

// out viewed as [outer, nidx, inner], params as [outer, limit, inner]. An index outside
// [0, limit) reads zeros (a kernel cannot raise; TensorFlow's GPU kernel does the same).
__kernel void gather(__global T* out, __global const T* params, __global const TI* idx, const int n,
                     const int nidx, const int inner, const int limit)
{
    int i = get_global_id(0);
    if (i >= n) return;
    int o = i / (nidx * inner);
    int rest = i - o * nidx * inner;
    int j = rest / inner;
    int k = rest - j * inner;
    TI v = idx[j];
    out[i] = (v >= 0 && v < limit) ? params[((long)o * limit + v) * inner + k] : (T)0;
}

// UnsortedSegmentSum (and Max/Min: COMBINE and INIT): out[s, k] = the sum of data[j, k]
// over j with ids[j] == s; one work item per output element, scanning the ids (no atomics
// needed, deterministic order: repeated ids combine in index order). Ids outside
// [0, segments) are dropped.
__kernel void segment_sum(__global T* out, __global const T* data, __global const TI* ids, const int n,
                          const int nids, const int inner)
{
    int i = get_global_id(0);
    if (i >= n) return;
    int s = i / inner;
    int k = i - s * inner;
    T acc = INIT;
    for (int j = 0; j < nids; ++j)
        if (ids[j] == (TI)s) acc = COMBINE(acc, data[(long)j * inner + k]);
    out[i] = acc;
}

// GatherNd: out viewed as [nidx, inner]; row r reads params at the K coordinates
// idx[r * K ...] of dims[0..K) (params viewed as [dims..., inner]). A coordinate outside its
// dimension reads zeros, as gather's.
__kernel void gather_nd(__global T* out, __global const T* params, __global const TI* idx, const int n,
                        const int inner, __global const int* dims)
{
    int i = get_global_id(0);
    if (i >= n) return;
    const int r = i / inner;
    const int k = i - r * inner;
    const int K = dims[0];
    long at = 0;
    bool ok = true;
    for (int d = 0; d < K; ++d) {
        const TI v = idx[(long)r * K + d];
        ok = ok && v >= 0 && v < dims[1 + d];
        at = at * dims[1 + d] + (ok ? v : 0);
    }
    out[i] = ok ? params[at * inner + k] : (T)0;
}
