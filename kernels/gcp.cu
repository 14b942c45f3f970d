/*
 * gcp.cu - GCP's sampled model values and gradient (src/engine/gcp.rs defines them,
 * src/engine/cuda/gcp.rs drives these kernels), in fp64 on CUDA cores.
 *
 * A sample is n entries in COO form: coords[k * order + m] the index of entry k in mode
 * m. Factors are double[dims[m]][rank], row-major.
 *
 * - hls_gcp_values: values[k] = sum_r prod_m F_m[i_km, r], one thread per entry,
 *   grid-stride, the sum over r in order (as on the CPU).
 * - hls_gcp_gradient: for every mode m, grad_m[i_km, r] += y[k] prod_{j != m}
 *   F_j[i_kj, r]; one thread per (entry, column) pair (t = k * rank + r, so that the
 *   threads of a warp read consecutive columns of a factor row), grid-stride, fp64
 *   atomics into the zeroed gradients. The order of the additions varies from run to
 *   run (atomics); the CPU's sums are in a fixed order.
 * The host computes y from the values (the engine knows no loss), so a gradient is two
 * launches with a copy each way between them. No shared memory.
 */
#include "hls_common.cuh"

typedef struct HlsGcpParams {
    uint64_t coords;                /* const uint32_t[n][order] */
    uint64_t values;                /* double[n]: model values (hls_gcp_values) */
    uint64_t y;                     /* const double[n]: w df/dm (hls_gcp_gradient) */
    uint64_t factor[HLS_MAX_ORDER]; /* const double[dims[m]][rank] */
    uint64_t grad[HLS_MAX_ORDER];   /* double[dims[m]][rank], zeroed */
    uint64_t n;                     /* entries */
    uint32_t order;
    uint32_t rank;
} HlsGcpParams;

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_gcp_values(const HlsGcpParams p) {
    const uint32_t* coords = reinterpret_cast<const uint32_t*>(p.coords);
    double* values = reinterpret_cast<double*>(p.values);
    for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < p.n;
         k += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t* c = coords + k * p.order;
        double m = 0.0;
        for (uint32_t r = 0; r < p.rank; ++r) {
            double prod = 1.0;
            for (uint32_t j = 0; j < p.order; ++j)
                prod *= reinterpret_cast<const double*>(p.factor[j])[(uint64_t)c[j] * p.rank + r];
            m += prod;
        }
        values[k] = m;
    }
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_gcp_gradient(const HlsGcpParams p) {
    const uint32_t* coords = reinterpret_cast<const uint32_t*>(p.coords);
    const double* y = reinterpret_cast<const double*>(p.y);
    const uint64_t total = p.n * p.rank;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t k = t / p.rank;
        const uint32_t r = (uint32_t)(t % p.rank);
        const double yk = y[k];
        if (yk == 0.0) continue;
        const uint32_t* c = coords + k * p.order;
        for (uint32_t m = 0; m < p.order; ++m) {
            double prod = yk;
            for (uint32_t j = 0; j < p.order; ++j)
                if (j != m)
                    prod *= reinterpret_cast<const double*>(p.factor[j])[(uint64_t)c[j] * p.rank + r];
            atomicAdd(reinterpret_cast<double*>(p.grad[m]) + (uint64_t)c[m] * p.rank + r, prod);
        }
    }
}
