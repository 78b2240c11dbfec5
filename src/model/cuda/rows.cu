// leapgnn's row kernels for the cuda feature (built to PTX by build.rs).
// One thread per output element, the column fastest, so a warp reads one
// row's consecutive floats; a grid-stride loop covers any size.

#define FOR_EACH_ELEMENT(i, total)                                               \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (total); \
         i += (size_t)blockDim.x * gridDim.x)

extern "C" __global__ void gather_rows(const float *x, const unsigned int *ids, float *out,
                                       unsigned int n_out, unsigned int width) {
    const size_t total = (size_t)n_out * width;
    FOR_EACH_ELEMENT(i, total) {
        const size_t r = i / width, c = i % width;
        out[i] = x[(size_t)ids[r] * width + c];
    }
}

// out[r, c] = sum over j in [indptr[r], indptr[r + 1]) of m[perm ? perm[j] : j, c],
// summed in j order (the CPU kernel's order, so both give the same floats).
extern "C" __global__ void segment_sum(const float *m, const unsigned int *indptr,
                                       const unsigned int *perm, unsigned int has_perm,
                                       float *out, unsigned int n_rows, unsigned int width) {
    const size_t total = (size_t)n_rows * width;
    FOR_EACH_ELEMENT(i, total) {
        const size_t r = i / width, c = i % width;
        float acc = 0.0f;
        for (unsigned int j = indptr[r]; j < indptr[r + 1]; ++j) {
            const size_t e = has_perm ? perm[j] : j;
            acc += m[e * width + c];
        }
        out[i] = acc;
    }
}

// Max over each row's sources, column by column: the first strict maximum in
// edge order wins (the CPU kernel's rule); a row without edges gives 0.
// Writes the values to out, or (write_arg) the winning sources to arg.
extern "C" __global__ void segment_max(const float *x, const unsigned int *indptr,
                                       const unsigned int *nbr, float *out, unsigned int *arg,
                                       unsigned int write_arg, unsigned int n_rows,
                                       unsigned int width) {
    const size_t total = (size_t)n_rows * width;
    FOR_EACH_ELEMENT(i, total) {
        const size_t r = i / width, c = i % width;
        const unsigned int j0 = indptr[r], j1 = indptr[r + 1];
        unsigned int a = 0;
        float best = 0.0f;
        if (j0 < j1) {
            a = nbr[j0];
            best = x[(size_t)a * width + c];
            for (unsigned int j = j0 + 1; j < j1; ++j) {
                const unsigned int s = nbr[j];
                const float v = x[(size_t)s * width + c];
                if (v > best) {
                    best = v;
                    a = s;
                }
            }
        }
        if (write_arg) {
            arg[i] = a;
        } else {
            out[i] = best;
        }
    }
}

// Gradient of segment_max: source s, column c collects the gradient of every
// destination (its transposed row, in order) whose maximum it was.
extern "C" __global__ void max_backward(const float *grad, const unsigned int *arg,
                                        const unsigned int *t_indptr, const unsigned int *t_dst,
                                        float *out, unsigned int n_src, unsigned int width) {
    const size_t total = (size_t)n_src * width;
    FOR_EACH_ELEMENT(i, total) {
        const size_t s = i / width, c = i % width;
        float acc = 0.0f;
        for (unsigned int j = t_indptr[s]; j < t_indptr[s + 1]; ++j) {
            const size_t d = (size_t)t_dst[j] * width + c;
            if (arg[d] == s) acc += grad[d];
        }
        out[i] = acc;
    }
}
