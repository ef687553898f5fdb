// Gathers and their gradient. T element type, TI index type.

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

// UnsortedSegmentSum: out[s, k] = sum of data[j, k] over j with ids[j] == s; one work item
// per output element, scanning the ids (no atomics needed, deterministic order). Ids outside
// [0, segments) are dropped.
__kernel void segment_sum(__global T* out, __global const T* data, __global const TI* ids, const int n,
                          const int nids, const int inner)
{
    int i = get_global_id(0);
    if (i >= n) return;
    int s = i / inner;
    int k = i - s * inner;
    T acc = 0;
    for (int j = 0; j < nids; ++j)
        if (ids[j] == (TI)s) acc += data[(long)j * inner + k];
    out[i] = acc;
}
