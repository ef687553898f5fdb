// Index math of 4-D image tensors in either layout (NHWC or NCHW), shared by conv.cu and
// pool.cu: kernels read and write images through these, so no layout needs a transpose.
#ifndef TW_SPATIAL_CUH
#define TW_SPATIAL_CUH

struct TwImage {
    long long n, h, w, c;
    int nchw;
};

// The offset of element (b, y, x, ch).
__device__ __forceinline__ long long tw_image_offset(const TwImage& s, long long b, long long y, long long x,
                                                     long long ch) {
    return s.nchw ? ((b * s.c + ch) * s.h + y) * s.w + x : ((b * s.h + y) * s.w + x) * s.c + ch;
}

// (b, y, x, ch) of the element at offset i: threads that follow i write memory in order.
__device__ __forceinline__ void tw_image_index(const TwImage& s, long long i, long long& b, long long& y,
                                               long long& x, long long& ch) {
    if (s.nchw) {
        x = i % s.w;
        i /= s.w;
        y = i % s.h;
        i /= s.h;
        ch = i % s.c;
        b = i / s.c;
    } else {
        ch = i % s.c;
        i /= s.c;
        x = i % s.w;
        i /= s.w;
        y = i % s.h;
        b = i / s.h;
    }
}

#endif  // TW_SPATIAL_CUH
