// The reference linear and matmul: one dot product per output element,
// accumulated in double.
#include <cstdint>

#include "reference/kernels.hpp"

namespace mkc::reference {

void linear(int64_t rows, int64_t in, int64_t out, const float *x, const float *weights,
            const float *bias, mkc_activation_kind activation, float alpha, float beta, float *y) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
            // weights [out, in]: row o is the dot product's other factor.
            double sum = bias ? bias[o] : 0.0;
            for (int64_t i = 0; i < in; ++i)
                sum += double(x[r * in + i]) * weights[o * in + i];
            y[r * out + o] = activate(activation, alpha, beta, static_cast<float>(sum));
        }
}

void matmul(const mkc_matmul_params &p, const Dims &a_dims, const float *a, const Dims &b_dims,
            const float *b, const float *bias, const Dims &dst_dims, float *dst,
            const Dims *addend_dims, const float *addend) {
    const size_t rank = dst_dims.size();
    // The addend's stride along each of dst's dims (0 where it broadcasts).
    Dims addend_strides(rank, 0);
    if (addend) {
        Dims ed(rank - addend_dims->size(), 1);
        ed.insert(ed.end(), addend_dims->begin(), addend_dims->end());
        for (size_t i = rank, step = 1; i-- > 0;) {
            addend_strides[i] = ed[i] == 1 ? 0 : static_cast<int64_t>(step);
            step *= static_cast<size_t>(ed[i]);
        }
    }
    // a and b with leading 1s up to dst's rank: their batch dims then line
    // up with dst's, a 1 standing for every index.
    Dims ad(rank - a_dims.size(), 1), bd(rank - b_dims.size(), 1);
    ad.insert(ad.end(), a_dims.begin(), a_dims.end());
    bd.insert(bd.end(), b_dims.begin(), b_dims.end());
    const int64_t M = dst_dims[rank - 2], N = dst_dims[rank - 1];
    const int64_t K = p.transpose_a ? ad[rank - 2] : ad[rank - 1];
    // Stored as [..., M, K] or, transposed, [..., K, M] (b: [..., K, N] or
    // [..., N, K]): the strides of element (m, k) and (k, n).
    const int64_t a_m = p.transpose_a ? 1 : K, a_k = p.transpose_a ? M : 1;
    const int64_t b_k = p.transpose_b ? 1 : N, b_n = p.transpose_b ? K : 1;

    int64_t batches = 1;
    for (size_t i = 0; i + 2 < rank; ++i)
        batches *= dst_dims[i];
    for (int64_t batch = 0; batch < batches; ++batch) {
        // dst's batch index, split into its dims from the last, and each
        // operand's matrix at the index it broadcasts to.
        int64_t rest = batch, a_matrix = 0, b_matrix = 0, a_step = 1, b_step = 1;
        for (size_t i = rank - 2; i-- > 0;) {
            const int64_t index = rest % dst_dims[i];
            rest /= dst_dims[i];
            a_matrix += (ad[i] == 1 ? 0 : index) * a_step;
            b_matrix += (bd[i] == 1 ? 0 : index) * b_step;
            a_step *= ad[i];
            b_step *= bd[i];
        }
        const float *am = a + a_matrix * M * K, *bm = b + b_matrix * K * N;
        float *y = dst + batch * M * N;
        // The addend's matrix for this batch index.
        int64_t addend_matrix = 0;
        for (size_t i = rank - 2, r = static_cast<size_t>(batch); i-- > 0;) {
            addend_matrix += static_cast<int64_t>(r % dst_dims[i]) * addend_strides[i];
            r /= dst_dims[i];
        }
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                double sum = 0;
                for (int64_t k = 0; k < K; ++k)
                    sum += double(am[m * a_m + k * a_k]) * bm[k * b_k + n * b_n];
                if (bias)
                    sum += bias[n];
                // The scale takes the bias too; then the addend, in float32
                // as the post-op adds it; then the activation.
                float v = static_cast<float>(p.scale * sum);
                if (addend)
                    v += addend[addend_matrix + m * addend_strides[rank - 2] +
                                n * addend_strides[rank - 1]];
                y[m * N + n] = activate(p.activation, p.activation_alpha, p.activation_beta, v);
            }
    }
}

} // namespace mkc::reference
