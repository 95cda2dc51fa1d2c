// The lean forward's decoding step (ragen_core/policy/fast_qwen2.py, DecodeState.step) compiled: the same ATen
// operator calls, in the same order, with the same arguments, made from C++ instead of Python.
//
// Why: a decoding step of the tiny model is about 90 small operator calls (1-128 rows of width 128), so part of
// its time is the interpreter and the Python bindings around each call, not the arithmetic. Calling the same
// operators from here removes that part and nothing else: every kernel that computes a number is ATen's own, fed
// the same tensors, so the logits are the Python step's bit for bit (tests/policy/test_native_decode_s68.py
// compares every step's). No arithmetic is written here.
//
// Built on first use by ragen_core/policy/native.py with the system's C++ compiler against the installed torch's
// headers; the operator's namespace (RAGEN2_NAMESPACE, substituted before compiling) names the build, so two
// builds can live in one process. Where no compiler is found the Python step runs instead.

#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

using at::Tensor;

namespace {

// A Python number passed to a tensor operator (`scores.mul_(scale)`, `h + eps`) reaches ATen as a 0-dim "wrapped
// number" tensor, not as a Scalar; the two overloads round differently in bfloat16 (the Scalar one rounds the
// factor to the tensor's dtype first), so the Python step's calls are reproduced with the wrapped tensor.
Tensor wrapped(double value) {
  Tensor t = c10::scalar_to_tensor(c10::Scalar(value));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

// fast_qwen2._rms_norm: F.rms_norm in float32 (transformers' RMSNorm bit for bit there); other dtypes normalise
// in float32 as transformers does: weight * (h * rsqrt(mean(h^2) + eps)).to(dtype).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  if (x.scalar_type() == at::kFloat) {
    return at::rms_norm(x, {x.size(-1)}, weight, eps);
  }
  Tensor h = x.to(at::kFloat);
  return weight * (h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + wrapped(eps))).to(x.scalar_type());
}

// DecodeState.step from the embedding on; the caller has placed the rows (DecodeState._place) and advanced the
// positions. Shapes (n rows still decoding, Hq query heads, Hk key/value heads, d head dim, C cache columns):
//   tokens [n] (long); embed [V, hidden]; cos_sin [n, 2, d] (cos, signed sin); k_caches, v_caches: per layer
//   [>= n, Hk, C, d], written in place at column `col`; bias [n, 1, 1, col + 1] (additive mask);
//   weights: per layer 7 tensors (input norm, fused qkv weight, qkv bias, o_proj, post-attention norm, fused
//   gate/up, down_proj); eps: per layer 2 (the two norms'); slot_order: the rows' order, or None when the slots
//   are the rows; returns the logits [n, V].
Tensor decode_step(const Tensor& tokens, const Tensor& embed, const Tensor& cos_sin, at::TensorList k_caches,
                   at::TensorList v_caches, const Tensor& bias, int64_t col, at::TensorList weights,
                   at::ArrayRef<double> eps, int64_t hq, int64_t hk, int64_t d, int64_t inter, double scale,
                   const Tensor& final_norm, double final_eps, const Tensor& head,
                   const std::optional<Tensor>& slot_order) {
  TORCH_CHECK(k_caches.size() == v_caches.size() && weights.size() == 7 * k_caches.size() &&
                  eps.size() == 2 * k_caches.size(),
              "decode_step: per layer one key cache, one value cache, 7 weights and 2 epsilons");
  at::NoGradGuard no_grad;
  const int64_t n = tokens.size(0);
  const int64_t nqk = (hq + hk) * d;
  const Tensor cos = cos_sin.slice(1, 0, 1);
  const Tensor sin = cos_sin.slice(1, 1);
  Tensor h = at::embedding(embed, tokens);  // [n, hidden]
  for (size_t l = 0; l < k_caches.size(); ++l) {
    const Tensor* w = &weights[7 * l];
    Tensor kb = k_caches[l].slice(0, 0, n);
    Tensor vb = v_caches[l].slice(0, 0, n);
    Tensor qkv = at::linear(rms_norm(h, w[0], eps[2 * l]), w[1], w[2]);
    Tensor qk = qkv.slice(1, 0, nqk).view({n, hq + hk, d});
    qk = qk * cos + at::roll(qk, {d / 2}, {-1}) * sin;  // RoPE on queries and keys at once
    kb.select(2, col).copy_(qk.slice(1, hq));
    vb.select(2, col).copy_(qkv.slice(1, nqk).view({n, hk, d}));
    Tensor q = qk.slice(1, 0, hq).view({n, hk, hq / hk, d});  // grouped: query heads per key head
    Tensor scores = at::matmul(q, kb.slice(2, 0, col + 1).transpose(2, 3)).mul_(wrapped(scale)).add_(bias);
    Tensor attn = at::matmul(at::softmax(scores.to(at::kFloat), -1).to(q.scalar_type()), vb.slice(2, 0, col + 1));
    h = h + at::linear(attn.view({n, hq * d}), w[3]);
    Tensor gu = at::linear(rms_norm(h, w[4], eps[2 * l + 1]), w[5]);
    h = h + at::linear(at::silu(gu.slice(1, 0, inter)) * gu.slice(1, inter), w[6]);
  }
  if (slot_order.has_value()) {
    h = h.index_select(0, *slot_order);  // slot order -> the rows' order
  }
  return at::linear(rms_norm(h, final_norm, final_eps), head);
}

}  // namespace

TORCH_LIBRARY(RAGEN2_NAMESPACE, m) {
  m.def(
      "decode_step(Tensor tokens, Tensor embed, Tensor cos_sin, Tensor[] k_caches, Tensor[] v_caches, Tensor bias, "
      "int col, Tensor[] weights, float[] eps, int hq, int hk, int d, int inter, float scale, Tensor final_norm, "
      "float final_eps, Tensor head, Tensor? slot_order) -> Tensor");
  m.impl("decode_step", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(decode_step));
}
