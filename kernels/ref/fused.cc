// Reference kernels for fused ops: each is the composition of the unfused
// reference kernels, so that fused and unfused plans agree exactly in fp32.
#include <vector>

#include "kernels/ref/ref.h"

namespace ag::ref {

void NormQkvRope(const float* x, const float* norm_w, const float* w, const float* bias,
                 const RotaryPositions& positions, int64_t tokens, int64_t hidden, float eps, int64_t heads,
                 int64_t kv_heads, int64_t head_dim, int64_t rot, float theta, float* q, float* k, float* v,
                 InputQuant in) {
  const int64_t qw = heads * head_dim, kvw = kv_heads * head_dim;
  std::vector<float> normed(tokens * hidden);
  RmsNorm(x, norm_w, tokens, hidden, eps, normed.data());
  QuantizeInputRows(normed.data(), tokens, hidden, in);
  Linear(normed.data(), w, bias, tokens, hidden, qw, q);
  Linear(normed.data(), w + qw * hidden, bias != nullptr ? bias + qw : nullptr, tokens, hidden, kvw, k);
  Linear(normed.data(), w + (qw + kvw) * hidden, bias != nullptr ? bias + qw + kvw : nullptr, tokens, hidden, kvw, v);
  Rotary(q, positions, tokens, heads, head_dim, rot, theta, q);
  Rotary(k, positions, tokens, kv_heads, head_dim, rot, theta, k);
}

void NormGateUpSilu(const float* x, const float* norm_w, const float* w, int64_t rows, int64_t hidden, int64_t inter,
                    float eps, float* out, InputQuant in) {
  std::vector<float> normed(rows * hidden), gate(rows * inter), up(rows * inter);
  RmsNorm(x, norm_w, rows, hidden, eps, normed.data());
  QuantizeInputRows(normed.data(), rows, hidden, in);
  Linear(normed.data(), w, nullptr, rows, hidden, inter, gate.data());
  Linear(normed.data(), w + inter * hidden, nullptr, rows, hidden, inter, up.data());
  Silu(gate.data(), rows * inter, gate.data());
  Mul(gate.data(), up.data(), rows * inter, out);
}

void LinearResidual(const float* x, const float* w, const float* residual, int64_t rows, int64_t in,
                    int64_t out_features, float* out, InputQuant in_quant) {
  std::vector<float> y(rows * out_features), rounded;
  if (in_quant != InputQuant::kNone) {
    rounded.assign(x, x + rows * in);
    QuantizeInputRows(rounded.data(), rows, in, in_quant);
    x = rounded.data();
  }
  Linear(x, w, nullptr, rows, in, out_features, y.data());
  Add(residual, y.data(), rows * out_features, out);
}

void RmsNormResidual(const float* x, const float* w, const float* residual, int64_t rows, int64_t n, float eps,
                     float* out) {
  std::vector<float> normed(rows * n);
  RmsNorm(x, w, rows, n, eps, normed.data());
  Add(residual, normed.data(), rows * n, out);
}

void AddRmsNorm(const float* a, const float* b, const float* w, int64_t rows, int64_t n, float eps, float* sum,
                float* normed) {
  Add(a, b, rows * n, sum);
  RmsNorm(sum, w, rows, n, eps, normed);
}

void NormLinear(const float* x, const float* norm_w, const float* w, int64_t rows, int64_t in, int64_t out_features,
                float eps, float* y, InputQuant in_quant) {
  std::vector<float> normed(rows * in);
  RmsNorm(x, norm_w, rows, in, eps, normed.data());
  QuantizeInputRows(normed.data(), rows, in, in_quant);
  Linear(normed.data(), w, nullptr, rows, in, out_features, y);
}

}  // namespace ag::ref
