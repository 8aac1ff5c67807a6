/*
 * The gather kernel of hip/gather.c, one source for both platforms: nvcc
 * makes PTX of it (compute_75, JIT-compiled by the driver for the GPU
 * present) and hipcc code objects for PDX_HIP_GPU_TARGETS, at build time;
 * cmake/PdxEmbed.cmake turns the result into a C array in libpdx.
 *
 * pdx_gather(runs, nruns, slices, run_workers): a worker is one warp (32
 * lanes; 64 on AMD's wave64 GPUs). Worker w copies runs w / slices,
 * + run_workers, ... and of each run the chunks w % slices, + slices, ...:
 * many runs share the grid, and a long run is shared by `slices` workers.
 * A chunk is UNROLL words per lane, all loaded before any is stored, so
 * each lane keeps UNROLL loads in flight. Words are 16 bytes when src and
 * dst agree modulo 16, else the widest size they agree on; the bytes before
 * the first aligned word and after the last are copied one by one.
 *
 * pdx_pages(bufs, src, dst, nbufs, npages, bpp, slices, item_workers, skip):
 * the same copies over items (buffer b, list position i): bpp bytes from
 * bufs[b].src + src[i] * bpp to bufs[b].dst + dst[i] * bpp, the addresses
 * made on the GPU from page lists, not listed run by run. A block whose
 * first thread reads a nonzero *skip (a device word; NULL: none) copies
 * nothing.
 */
#include <stdint.h>

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define PDX_LANES  64
#define PDX_BOUNDS __launch_bounds__(256)
#else
/* At most 80 registers (3 blocks of 256 threads per SM): the 16-byte path
 * needs about 62, and left to itself ptxas gives the kernel over 100. */
#define PDX_LANES  32
#define PDX_BOUNDS __launch_bounds__(256, 3)
#endif

#define PDX_UNROLL 8

struct pdx_run {
    uint64_t src;
    uint64_t dst;
    uint64_t len;
};

/* n words of T from s to d: chunk c = slice, slice + slices, ... */
template <typename T>
__device__ __forceinline__ void copy_words(const T *__restrict__ s, T *__restrict__ d, uint64_t n,
                                           uint32_t slice, uint32_t slices, uint32_t lane)
{
    const uint64_t chunk = (uint64_t)PDX_LANES * PDX_UNROLL;

#pragma unroll 1
    for (uint64_t c = (uint64_t)slice * chunk; c < n; c += (uint64_t)slices * chunk) {
        const T *sp = s + c + lane;
        T *dp = d + c + lane;
        T v[PDX_UNROLL];

        if (c + chunk <= n) {
#pragma unroll
            for (int u = 0; u < PDX_UNROLL; u++)
                v[u] = sp[u * PDX_LANES];
#pragma unroll
            for (int u = 0; u < PDX_UNROLL; u++)
                dp[u * PDX_LANES] = v[u];
        } else {

#pragma unroll
            for (int u = 0; u < PDX_UNROLL; u++)
                if (lane + u * PDX_LANES < n - c)
                    v[u] = sp[u * PDX_LANES];
#pragma unroll
            for (int u = 0; u < PDX_UNROLL; u++)
                if (lane + u * PDX_LANES < n - c)
                    dp[u * PDX_LANES] = v[u];
        }
    }
}

/* The narrower words out of line: inlined beside the 16-byte path they
 * would raise the whole kernel's register count (and cut its occupancy). */
template <typename T>
__device__ __noinline__ void copy_narrow(const uint8_t *s, uint8_t *d, uint64_t n, uint32_t slice,
                                         uint32_t slices, uint32_t lane)
{
    copy_words((const T *)s, (T *)d, n, slice, slices, lane);
}

__device__ __forceinline__ void copy_run(uint64_t src, uint64_t dst, uint64_t len, uint32_t slice,
                                         uint32_t slices, uint32_t lane)
{
    const uint8_t *s = (const uint8_t *)src;
    uint8_t *d = (uint8_t *)dst;
    unsigned mis = (unsigned)((src ^ dst) & 15);
    unsigned w = mis == 0 ? 16 : (mis & 7) == 0 ? 8 : (mis & 3) == 0 ? 4 : (mis & 1) == 0 ? 2 : 1;
    uint64_t head = (w - (dst & (w - 1))) & (w - 1);
    uint64_t n, tail;

    if (head > len)
        head = len;
    n = (len - head) / w;
    tail = head + n * w;
    /* head < 16 and len - tail < 16 bytes: lanes of slice 0 */
    if (slice == 0) {
        if (lane < head)
            d[lane] = s[lane];
        if (lane < len - tail)
            d[tail + lane] = s[tail + lane];
    }
    if (n == 0)
        return;
    switch (w) {
    case 16:
        copy_words((const uint4 *)(s + head), (uint4 *)(d + head), n, slice, slices, lane);
        break;
    case 8:
        copy_narrow<uint2>(s + head, d + head, n, slice, slices, lane);
        break;
    case 4:
        copy_narrow<uint32_t>(s + head, d + head, n, slice, slices, lane);
        break;
    case 2:
        copy_narrow<uint16_t>(s + head, d + head, n, slice, slices, lane);
        break;
    default:
        copy_narrow<uint8_t>(s + head, d + head, n, slice, slices, lane);
        break;
    }
}

extern "C" __global__ void PDX_BOUNDS
pdx_gather(const struct pdx_run *runs, uint32_t nruns, uint32_t slices, uint32_t run_workers)
{
    uint32_t worker = (blockIdx.x * blockDim.x + threadIdx.x) / PDX_LANES;
    uint32_t lane = threadIdx.x % PDX_LANES;

    if (worker >= run_workers * slices)
        return;
    for (uint32_t r = worker / slices; r < nruns; r += run_workers) {
        struct pdx_run run = runs[r];

        if (run.len)
            copy_run(run.src, run.dst, run.len, worker % slices, slices, lane);
    }
}

struct pdx_page_buf {
    uint64_t src;
    uint64_t dst;
};


extern "C" __global__ void PDX_BOUNDS
pdx_pages(const struct pdx_page_buf *bufs, const uint32_t *src, const uint32_t *dst,
          uint32_t nbufs, uint32_t npages, uint64_t bpp, uint32_t slices, uint32_t item_workers,
          const uint64_t *skip)
{
    uint32_t worker = (blockIdx.x * blockDim.x + threadIdx.x) / PDX_LANES;
    uint32_t lane = threadIdx.x % PDX_LANES;
    uint64_t items = (uint64_t)nbufs * npages;

    if (skip) { /* one read per block, before any thread reads a table */
        __shared__ int skipped;

        if (threadIdx.x == 0)
            skipped = *(volatile const uint64_t *)skip != 0;
        __syncthreads();
        if (skipped)
            return;
    }
    if (worker >= item_workers * slices)
        return;
    for (uint64_t it = worker / slices; it < items; it += item_workers) {
        uint32_t b = (uint32_t)(it / npages), i = (uint32_t)(it % npages);
        struct pdx_page_buf buf = bufs[b];

        copy_run(buf.src + src[i] * bpp, buf.dst + dst[i] * bpp, bpp, worker % slices, slices,
                 lane);
    }
}
