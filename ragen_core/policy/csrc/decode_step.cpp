// The lean forward's decoding step (ragen_core/policy/fast_qwen2.py, DecodeState.step) compiled: the same ATen
// operator calls, in the same order, with the same arguments, made from C++ instead of Python.
//
// Why: a decoding step of the tiny model is about 90 small operator calls (1-128 rows of width 128), so part of
// its time is the interpreter and the Python bindings around each call, not the arithmetic. Calling the same
// operators from here removes that part and nothing else: every kernel that computes a number is ATen's own, fed
// the same tensors, so the logits are the Python step's bit for bit (tests/policy/test_native_decode_s68.py
// compares every step's). This first part writes no arithmetic of its own.
//
// Two more parts follow: the fused float32 decoding step (its own loops for the norms, RoPE and attention, the
// default for float32 decoding), and the training step's element-wise pieces (the `train_*` operators) that
// `model.fused_training` takes. Those two compute their own arithmetic and round differently from ATen.
//
// Built on first use by ragen_core/policy/native.py with the system's C++ compiler against the installed torch's
// headers; the operator's namespace (RAGEN2_NAMESPACE, substituted before compiling) names the build, so two
// builds can live in one process. Where no compiler is found the Python step runs instead.

#include <ATen/ATen.h>
#include <torch/library.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

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


// ------------------------------------------------------------------------------------------------------------------
// The fused step (float32): the same function with a few loops of its own in place of most of the small operator
// calls. The matrix products, the softmax and SiLU stay ATen's (MKL's products, ATen's vectorised exponentials);
// the RMSNorms, RoPE, the cache writes and the attention's two products are written here, one pass each.
//
// Why: at 1-128 rows of width 128, a step of the call-for-call version above spends about half its time outside its
// matrix products: ~45 operator calls per layer at 3-50 us each (a composite RMSNorm alone is ~10 calls), and the
// attention's batched products, whose per-matrix set-up (one [g, d] x [d, T] product per row and key/value head)
// costs more than their arithmetic. The loops below change the summation order of the norms' and the attention's
// sums (8 partial sums, then a fixed tree), so the logits differ from the call-for-call step by float rounding
// (about 1e-6 relative; tests/policy/test_fused_decode.py), and a sampled token differs only where a draw falls
// within that distance of a boundary between two tokens' cumulative probabilities.
//
// No compiler flag changes the arithmetic: the vector type below is GCC's generic vector extension (8 floats,
// lowered to whatever registers the target has), and with -std=c++20 the compiler contracts no a * b + c into an
// FMA, so every clone of a loop computes the same numbers.

using v8 = float __attribute__((vector_size(32)));

inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof(v)); }

using i8 = int __attribute__((vector_size(32)));

#if defined(__clang__)
#define RAGEN2_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define RAGEN2_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, i8{__VA_ARGS__})
#endif

// The hot loops are built twice on x86-64, for AVX2 and for the baseline, and the loader picks the one the core
// runs (GCC's function multi-versioning); both compute the same numbers (no contraction, the same vector order).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RAGEN2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RAGEN2_CLONES
#endif

// The lanes' sum in a fixed tree, so the result does not depend on how the vector was lowered.
inline float hsum(v8 v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

// out[r, :] = weight * (x[r, :] / sqrt(mean(x[r, :]^2) + eps)) for the n rows of x ([n, width], row stride
// `stride`); width a multiple of 8. transformers' Qwen2RMSNorm in float32, with its sum taken in 8 partial sums.
// `inv_out` (when not null) receives each row's 1 / sqrt(mean(x^2) + eps), which the training backward reads.
RAGEN2_CLONES void rms_rows(const float* x, int64_t stride, const float* weight, float* out, int64_t n, int64_t width,
              float eps, float* inv_out = nullptr) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * stride;
    v8 acc = {};
    for (int64_t i = 0; i < width; i += 8) {
      v8 v = load8(xr + i);
      acc += v * v;
    }
    const float inv = 1.0f / std::sqrt(hsum(acc) / static_cast<float>(width) + eps);
    if (inv_out != nullptr) {
      inv_out[r] = inv;
    }
    float* o = out + r * width;
    for (int64_t i = 0; i < width; i += 8) {
      store8(o + i, load8(weight + i) * (load8(xr + i) * inv));
    }
  }
}

Tensor rms_norm_fused(const Tensor& x, const Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1 && weight.is_contiguous() && weight.numel() == x.size(1),
              "decode_step_fused: rows of unit stride and one norm weight per column");
  Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  rms_rows(x.data_ptr<float>(), x.stride(0), weight.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1),
           static_cast<float>(eps));
  return out;
}

// Eight lanes' sums of eight vectors at once: out[k] = sum of a[k]'s lanes, in a fixed tree (adjacent lanes, then
// pairs, then halves), the same on every target.
inline v8 sum8x8(const v8* a) {
  v8 b[4], c[2];
  for (int k = 0; k < 4; ++k) {
    b[k] = RAGEN2_SHUFFLE(a[2 * k], a[2 * k + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
           RAGEN2_SHUFFLE(a[2 * k], a[2 * k + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  }
  for (int k = 0; k < 2; ++k) {
    c[k] = RAGEN2_SHUFFLE(b[2 * k], b[2 * k + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
           RAGEN2_SHUFFLE(b[2 * k], b[2 * k + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  return RAGEN2_SHUFFLE(c[0], c[1], 0, 1, 2, 3, 8, 9, 10, 11) + RAGEN2_SHUFFLE(c[0], c[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

// The keys (or values) of one row and key/value head, [T, d] in two parts: the first `width` from its prompt's
// cache (shared by every row of that prompt), the rest from the row's own decoded columns.
struct Columns {
  const float* prompt;
  const float* own;
  int64_t width;
  int64_t d;
  const float* at(int64_t t) const { return t < width ? prompt + t * d : own + (t - width) * d; }
};

// One key/value head of one row: the scores of its g query heads against its T keys, scaled, plus the row's additive
// mask. scores: [g, T] (row stride `sstride`). Keys are taken eight at a time, so each is read once for all g queries
// and eight dot products end in one tree (sum8x8); the last T % 8 one by one (the same per-key sums, then hsum's
// tree).
RAGEN2_CLONES void head_scores(const float* q, int64_t g, Columns keys, int64_t T, float scale, const float* bias,
                               float* scores, int64_t sstride) {
  const int64_t d = keys.d;
  const int64_t chunks = d / 8;
  int64_t t = 0;
  for (; t + 8 <= T; t += 8) {
    const float* k[8];
    for (int64_t u = 0; u < 8; ++u) {
      k[u] = keys.at(t + u);
    }
    for (int64_t a = 0; a < g; ++a) {
      const float* qa = q + a * d;
      v8 acc[8];
      for (int64_t u = 0; u < 8; ++u) {
        v8 s = load8(qa) * load8(k[u]);
        for (int64_t c = 1; c < chunks; ++c) {
          s += load8(qa + 8 * c) * load8(k[u] + 8 * c);
        }
        acc[u] = s;
      }
      store8(scores + a * sstride + t, sum8x8(acc) * scale + load8(bias + t));
    }
  }
  for (; t < T; ++t) {
    const float* k = keys.at(t);
    for (int64_t a = 0; a < g; ++a) {
      const float* qa = q + a * d;
      v8 s = load8(qa) * load8(k);
      for (int64_t c = 1; c < chunks; ++c) {
        s += load8(qa + 8 * c) * load8(k + 8 * c);
      }
      scores[a * sstride + t] = hsum(s) * scale + bias[t];
    }
  }
}

// out[a, :] = sum_t p[a, t] v[t, :] (t in order) for the g query heads of one key/value head of one row: each value
// row read once for all g heads.
RAGEN2_CLONES void head_values(const float* p, int64_t pstride, int64_t g, Columns values, int64_t T, float* out) {
  constexpr int64_t kMaxAcc = 64;  // g * d / 8 accumulators
  const int64_t chunks = values.d / 8;
  v8 acc[kMaxAcc] = {};
  for (int64_t t = 0; t < T; ++t) {
    const float* v = values.at(t);
    for (int64_t a = 0; a < g; ++a) {
      const float w = p[a * pstride + t];
      for (int64_t c = 0; c < chunks; ++c) {
        acc[a * chunks + c] += w * load8(v + 8 * c);
      }
    }
  }
  for (int64_t i = 0; i < g * chunks; ++i) {
    store8(out + 8 * i, acc[i]);
  }
}

// The fused decoding step: decode_step's result from a layout without copies of the prompts' keys and values, float32
// only, head dim and hidden size multiples of 8, (query heads per key head) x head dim <= 512. Shapes (n rows still
// decoding, P distinct prompts of `width` columns, N new tokens at most):
//   k_prompt, v_prompt: per layer [P, Hk, width, d] (each distinct prompt's keys and values once);
//   k_own, v_own: per layer [>= n, Hk, N, d] (each row's decoded columns; this step writes column col - width);
//   owner [n] (long): the prompt of each row; bias [n, 1, 1, col + 1] (additive mask, unit last stride);
//   the rest as decode_step's.
Tensor decode_step_fused(const Tensor& tokens, const Tensor& embed, const Tensor& cos_sin, at::TensorList k_prompt,
                         at::TensorList v_prompt, at::TensorList k_own, at::TensorList v_own, const Tensor& owner,
                         const Tensor& bias, int64_t width, int64_t col, at::TensorList weights,
                         at::ArrayRef<double> eps, int64_t hq, int64_t hk, int64_t d, int64_t inter, double scale,
                         const Tensor& final_norm, double final_eps, const Tensor& head,
                         const std::optional<Tensor>& slot_order) {
  const size_t layers = k_own.size();
  TORCH_CHECK(k_prompt.size() == layers && v_prompt.size() == layers && v_own.size() == layers &&
                  weights.size() == 7 * layers && eps.size() == 2 * layers,
              "decode_step_fused: per layer two prompt caches, two own caches, 7 weights and 2 epsilons");
  TORCH_CHECK(embed.scalar_type() == at::kFloat && embed.device().is_cpu(), "decode_step_fused: float32 on the CPU");
  TORCH_CHECK(d % 8 == 0 && embed.size(1) % 8 == 0 && hq % hk == 0 && (hq / hk) * (d / 8) <= 64,
              "decode_step_fused: head dim and hidden size multiples of 8, whole query groups, (query heads per key "
              "head) x head dim <= 512");
  TORCH_CHECK(col >= width && bias.stride(3) == 1 && bias.size(3) == col + 1, "decode_step_fused: mask of col + 1");
  at::NoGradGuard no_grad;
  const int64_t n = tokens.size(0);
  const int64_t g = hq / hk;
  const int64_t T = col + 1;
  const int64_t nqk = (hq + hk) * d;
  const float fscale = static_cast<float>(scale);
  const Tensor cs_c = cos_sin.contiguous();
  const float* cs = cs_c.data_ptr<float>();  // [n, 2, d]
  const Tensor owner_c = owner.to(at::kLong).contiguous();
  const int64_t* own_p = owner_c.data_ptr<int64_t>();
  Tensor h = at::embedding(embed, tokens).contiguous();  // [n, hidden]
  Tensor q = at::empty({n, hq, d}, h.options());          // RoPE'd queries
  Tensor scores = at::empty({n, hq, T}, h.options());
  Tensor attn = at::empty({n, hq * d}, h.options());
  const float* bias_p = bias.data_ptr<float>();
  const int64_t bias_stride = bias.stride(0);
  for (size_t l = 0; l < layers; ++l) {
    const Tensor* w = &weights[7 * l];
    const Tensor &kp = k_prompt[l], &vp = v_prompt[l], &kb = k_own[l], &vb = v_own[l];
    TORCH_CHECK(kp.is_contiguous() && vp.is_contiguous() && kb.is_contiguous() && vb.is_contiguous() &&
                    kp.size(2) == width && kb.size(2) > col - width && kb.size(3) == d && kb.size(0) >= n,
                "decode_step_fused: contiguous caches, [P, Hk, width, d] prompts and [>= n, Hk, N, d] rows with a "
                "free column");
    const int64_t row_stride = kb.stride(0), head_stride = kb.stride(1);
    const int64_t prow_stride = kp.stride(0), phead_stride = kp.stride(1);
    Tensor qkv = at::addmm(w[2], rms_norm_fused(h, w[0], eps[2 * l]), w[1].t());  // [n, (hq + 2 hk) d]
    const float* qkv_p = qkv.data_ptr<float>();
    const int64_t qkv_stride = qkv.stride(0);
    float* q_p = q.data_ptr<float>();
    float* k_p = kb.data_ptr<float>();
    float* v_p = vb.data_ptr<float>();
    const float* kp_p = kp.data_ptr<float>();
    const float* vp_p = vp.data_ptr<float>();
    const int64_t half = d / 2;
    const int64_t own_col = col - width;
    for (int64_t r = 0; r < n; ++r) {
      const float* src = qkv_p + r * qkv_stride;
      const float* cos = cs + r * 2 * d;
      const float* sin = cos + d;
      for (int64_t hh = 0; hh < hq + hk; ++hh) {  // RoPE: x cos + roll(x, d / 2) sin (sin signed)
        const float* x = src + hh * d;
        float* dst =
            hh < hq ? q_p + (r * hq + hh) * d : k_p + r * row_stride + (hh - hq) * head_stride + own_col * d;
        for (int64_t i = 0; i < d; ++i) {
          dst[i] = x[i] * cos[i] + x[(i + half) % d] * sin[i];
        }
      }
      for (int64_t j = 0; j < hk; ++j) {
        std::memcpy(v_p + r * row_stride + j * head_stride + own_col * d, src + nqk + j * d, d * sizeof(float));
      }
    }
    auto columns = [&](const float* prompt, const float* own, int64_t r, int64_t j) {
      return Columns{prompt + own_p[r] * prow_stride + j * phead_stride, own + r * row_stride + j * head_stride,
                     width, d};
    };
    float* s_p = scores.data_ptr<float>();
    at::parallel_for(0, n * hk, 1, [&](int64_t begin, int64_t end) {
      for (int64_t rj = begin; rj < end; ++rj) {
        const int64_t r = rj / hk, j = rj % hk;
        head_scores(q_p + (r * hq + j * g) * d, g, columns(kp_p, k_p, r, j), T, fscale, bias_p + r * bias_stride,
                    s_p + (r * hq + j * g) * T, T);
      }
    });
    Tensor probs = at::_softmax(scores, -1, false);
    const float* p_p = probs.data_ptr<float>();
    float* a_p = attn.data_ptr<float>();
    at::parallel_for(0, n * hk, 1, [&](int64_t begin, int64_t end) {
      for (int64_t rj = begin; rj < end; ++rj) {
        const int64_t r = rj / hk, j = rj % hk;
        head_values(p_p + (r * hq + j * g) * T, T, g, columns(vp_p, v_p, r, j), T, a_p + (r * hq + j * g) * d);
      }
    });
    h.addmm_(attn, w[3].t());
    Tensor gu = at::mm(rms_norm_fused(h, w[4], eps[2 * l + 1]), w[5].t());  // [n, 2 inter]
    h.addmm_(at::silu(gu.slice(1, 0, inter)).mul_(gu.slice(1, inter)), w[6].t());
  }
  if (slot_order.has_value()) {
    h = h.index_select(0, *slot_order);  // slot order -> the rows' order
  }
  return at::mm(rms_norm_fused(h, final_norm, final_eps), head.t());
}


// ------------------------------------------------------------------------------------------------------------------
// The training step's element-wise pieces (ragen_core/policy/fused_train.py), float32 on the CPU, for the layers of
// the lean forward when `model.fused_training` is on: each is one pass over its rows where the operator path makes
// 5-15 (a composite RMSNorm and its backward, RoPE's products and roll, SiLU, the product with the up projection,
// the concatenations of the fused projections' gradients). N = rows x tokens; D, I, d a multiple of 8 (d of 16).
// Their sums run in 8 partial sums and a fixed tree, so they round differently from ATen's (tests compare values and
// gradients with transformers' forward within float32 rounding).

// exp(x) on 8 lanes: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, then a degree-6 polynomial (Cephes' expf;
// about 1 ulp for |x| < 88); x is clamped to [-88.38, 88.38].
inline v8 vexp(v8 x) {
  const v8 hi = v8{} + 88.3762626647949f, lo = v8{} - 88.3762626647949f;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  v8 fx = x * 1.44269504088896341f + 0.5f;
  i8 ni = __builtin_convertvector(fx, i8);
  v8 fl = __builtin_convertvector(ni, v8);
  fl -= __builtin_convertvector((fl > fx) & 1, v8);  // floor
  x -= fl * 0.693359375f;
  x -= fl * -2.12194440e-4f;
  const v8 z = x * x;
  v8 y = v8{} + 1.9875691500E-4f;
  y = y * x + 1.3981999507E-3f;
  y = y * x + 8.3334519073E-3f;
  y = y * x + 4.1665795894E-2f;
  y = y * x + 1.6666665459E-1f;
  y = y * x + 5.0000001201E-1f;
  y = y * z + x + 1.0f;
  i8 e = (__builtin_convertvector(fl, i8) + 127) << 23;
  v8 scale;
  std::memcpy(&scale, &e, sizeof(scale));
  return y * scale;
}

void check_rows(const Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.device().is_cpu() && t.is_contiguous() && t.dim() == 2 &&
                  t.size(1) % 8 == 0,
              "fused training: ", what, " must be a contiguous float32 CPU matrix with a multiple of 8 columns");
}

// y = w * (h * r), r = 1 / sqrt(mean(h^2) + eps) per row (the decoding step's rms_rows); returns (y [N, D], r [N]).
std::tuple<Tensor, Tensor> train_rms_forward(const Tensor& h, const Tensor& w, double eps) {
  check_rows(h, "the RMSNorm's input");
  TORCH_CHECK(w.is_contiguous() && w.numel() == h.size(1), "fused training: one RMSNorm weight per column");
  const int64_t N = h.size(0), D = h.size(1);
  Tensor y = at::empty_like(h);
  Tensor r = at::empty({N}, h.options());
  const float *hp = h.data_ptr<float>(), *wp = w.data_ptr<float>();
  float *yp = y.data_ptr<float>(), *rp = r.data_ptr<float>();
  at::parallel_for(0, N, 64, [&](int64_t b, int64_t e) {
    rms_rows(hp + b * D, D, wp, yp + b * D, e - b, D, static_cast<float>(eps), rp + b);
  });
  return {y, r};
}

// dh = r (g - h r mean(g h r)) (+ residual), g = dy w; dw = sum over rows of dy h r.
RAGEN2_CLONES void rms_backward_rows(const float* dy, const float* h, const float* w, const float* r,
                                     const float* residual, float* dh, float* dw, int64_t N, int64_t D) {
  v8 acc[64] = {};  // D <= 512 (checked); not a std::vector: GCC drops a vector type's alignment in templates
  for (int64_t n = 0; n < N; ++n) {
    const float *dyn = dy + n * D, *hn = h + n * D;
    const float rn = r[n];
    v8 m = {};
    for (int64_t i = 0; i < D; i += 8) {
      const v8 hr = load8(hn + i) * rn;
      const v8 d8 = load8(dyn + i);
      acc[i / 8] += d8 * hr;
      m += d8 * load8(w + i) * hr;
    }
    const float mean = hsum(m) / static_cast<float>(D);
    float* out = dh + n * D;
    for (int64_t i = 0; i < D; i += 8) {
      const v8 hr = load8(hn + i) * rn;
      v8 v = (load8(dyn + i) * load8(w + i) - hr * mean) * rn;
      if (residual != nullptr) {
        v += load8(residual + n * D + i);
      }
      store8(out + i, v);
    }
  }
  for (int64_t i = 0; i < D; i += 8) {
    store8(dw + i, acc[i / 8]);
  }
}

std::tuple<Tensor, Tensor> train_rms_backward(const Tensor& dy, const Tensor& h, const Tensor& w, const Tensor& r,
                                              const std::optional<Tensor>& residual) {
  check_rows(dy, "the RMSNorm's output gradient");
  check_rows(h, "the RMSNorm's input");
  TORCH_CHECK(h.size(1) <= 512, "fused training: the RMSNorm backward takes rows of at most 512");
  TORCH_CHECK(dy.sizes() == h.sizes() && w.is_contiguous() && w.numel() == h.size(1) && r.is_contiguous() &&
                  r.numel() == h.size(0),
              "fused training: the RMSNorm backward's shapes disagree");
  if (residual.has_value()) {
    check_rows(*residual, "the residual gradient");
    TORCH_CHECK(residual->sizes() == h.sizes(), "fused training: the residual gradient's shape");
  }
  Tensor dh = at::empty_like(h);
  Tensor dw = at::empty_like(w);
  rms_backward_rows(dy.data_ptr<float>(), h.data_ptr<float>(), w.data_ptr<float>(), r.data_ptr<float>(),
                    residual.has_value() ? residual->data_ptr<float>() : nullptr, dh.data_ptr<float>(),
                    dw.data_ptr<float>(), h.size(0), h.size(1));
  return {dh, dw};
}

// RoPE on 8 lanes of one head: x cos + roll(x, d / 2) sin (sin signed), lanes [i, i + 8) of the first half and the
// matching lanes of the second.
inline void rope8(const float* x, const float* c, const float* s, float* y, int64_t i, int64_t half) {
  const v8 a = load8(x + i), b = load8(x + i + half);
  store8(y + i, a * load8(c + i) + b * load8(s + i));
  store8(y + i + half, b * load8(c + i + half) + a * load8(s + i + half));
}

// qkv [B T, (hq + 2 hk) d] -> q [B, hq, T, d], k and v [B, hk, T, d] (contiguous), RoPE on q and k; cos, sin [B T, d].
std::tuple<Tensor, Tensor, Tensor> train_rope_split(const Tensor& qkv, const Tensor& cos, const Tensor& sin,
                                                    int64_t B, int64_t T, int64_t hq, int64_t hk, int64_t d) {
  check_rows(qkv, "the fused projection's output");
  TORCH_CHECK(d % 16 == 0 && qkv.size(0) == B * T && qkv.size(1) == (hq + 2 * hk) * d && cos.is_contiguous() &&
                  sin.is_contiguous() && cos.numel() == B * T * d && sin.numel() == B * T * d,
              "fused training: RoPE's shapes disagree (head dim a multiple of 16)");
  Tensor q = at::empty({B, hq, T, d}, qkv.options());
  Tensor k = at::empty({B, hk, T, d}, qkv.options());
  Tensor v = at::empty({B, hk, T, d}, qkv.options());
  const float *src = qkv.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const int64_t width = qkv.size(1), half = d / 2;
  at::parallel_for(0, B * T, 64, [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      const float* row = src + bt * width;
      const float *c = cp + bt * d, *s = sp + bt * d;
      for (int64_t hh = 0; hh < hq + hk; ++hh) {
        float* dst = hh < hq ? qp + ((b * hq + hh) * T + t) * d : kp + ((b * hk + hh - hq) * T + t) * d;
        for (int64_t i = 0; i < half; i += 8) {
          rope8(row + hh * d, c, s, dst, i, half);
        }
      }
      for (int64_t j = 0; j < hk; ++j) {
        std::memcpy(vp + ((b * hk + j) * T + t) * d, row + (hq + hk + j) * d, d * sizeof(float));
      }
    }
  });
  return {q, k, v};
}

// The backward of train_rope_split: dq [B, hq, T, d], dk and dv [B, hk, T, d] (any strides with a unit last one;
// None: zeros) -> dqkv [B T, (hq + 2 hk) d]; RoPE's transpose is dx = dy cos + roll(dy sin, d / 2).
Tensor train_rope_merge(const std::optional<Tensor>& dq, const std::optional<Tensor>& dk,
                        const std::optional<Tensor>& dv, const Tensor& cos, const Tensor& sin, int64_t B, int64_t T,
                        int64_t hq, int64_t hk, int64_t d) {
  TORCH_CHECK(d % 16 == 0 && cos.is_contiguous() && sin.is_contiguous() && cos.numel() == B * T * d,
              "fused training: RoPE's shapes disagree (head dim a multiple of 16)");
  for (const auto* t : {&dq, &dk, &dv}) {
    if (t->has_value()) {
      TORCH_CHECK((*t)->scalar_type() == at::kFloat && (*t)->dim() == 4 && (*t)->stride(3) == 1 &&
                      (*t)->size(0) == B && (*t)->size(2) == T && (*t)->size(3) == d,
                  "fused training: a query/key/value gradient of the wrong layout");
    }
  }
  const int64_t width = (hq + 2 * hk) * d, half = d / 2;
  Tensor out = at::empty({B * T, width}, cos.options());
  float* op = out.data_ptr<float>();
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  at::parallel_for(0, B * T, 64, [&](int64_t begin, int64_t end) {
    alignas(32) float tmp[512];
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      const float *c = cp + bt * d, *s = sp + bt * d;
      float* row = op + bt * width;
      for (int64_t hh = 0; hh < hq + 2 * hk; ++hh) {
        const bool is_q = hh < hq, is_k = !is_q && hh < hq + hk;
        const std::optional<Tensor>& g = is_q ? dq : (is_k ? dk : dv);
        float* dst = row + hh * d;
        if (!g.has_value()) {
          std::memset(dst, 0, d * sizeof(float));
          continue;
        }
        const int64_t head = is_q ? hh : (is_k ? hh - hq : hh - hq - hk);
        const float* gy = g->data_ptr<float>() + b * g->stride(0) + head * g->stride(1) + t * g->stride(2);
        if (!is_q && !is_k) {
          std::memcpy(dst, gy, d * sizeof(float));
          continue;
        }
        for (int64_t i = 0; i < d; i += 8) {
          store8(tmp + i, load8(gy + i) * load8(s + i));
        }
        for (int64_t i = 0; i < half; i += 8) {
          store8(dst + i, load8(gy + i) * load8(c + i) + load8(tmp + i + half));
          store8(dst + i + half, load8(gy + i + half) * load8(c + i + half) + load8(tmp + i));
        }
      }
    }
  });
  return out;
}

// gu [N, 2I] = [g | u] -> a = silu(g) u [N, I]. The backward recomputes sigmoid(g) rather than reading a saved copy:
// at these sizes a pass over memory costs more than the exponential.
inline v8 sigmoid8(v8 g) { return 1.0f / (1.0f + vexp(-g)); }

RAGEN2_CLONES void swiglu_forward_rows(const float* gu, float* a, int64_t begin, int64_t end, int64_t I) {
  for (int64_t n = begin; n < end; ++n) {
    const float *g = gu + n * 2 * I, *u = g + I;
    for (int64_t i = 0; i < I; i += 8) {
      const v8 gv = load8(g + i);
      store8(a + n * I + i, gv * sigmoid8(gv) * load8(u + i));
    }
  }
}

Tensor train_swiglu_forward(const Tensor& gu) {
  check_rows(gu, "the gate/up product");
  TORCH_CHECK(gu.size(1) % 16 == 0, "fused training: an intermediate size of a multiple of 8");
  const int64_t N = gu.size(0), I = gu.size(1) / 2;
  Tensor a = at::empty({N, I}, gu.options());
  const float* gp = gu.data_ptr<float>();
  float* ap = a.data_ptr<float>();
  at::parallel_for(0, N, 16, [&](int64_t b, int64_t e) { swiglu_forward_rows(gp, ap, b, e, I); });
  return a;
}

// dg = da u s (1 + g (1 - s)), du = da g s, with s = sigmoid(g): dgu [N, 2I].
RAGEN2_CLONES void swiglu_backward_rows(const float* da, const float* gu, float* dgu, int64_t begin, int64_t end,
                                        int64_t I) {
  for (int64_t n = begin; n < end; ++n) {
    const float *g = gu + n * 2 * I, *u = g + I;
    float *dg = dgu + n * 2 * I, *du = dg + I;
    for (int64_t i = 0; i < I; i += 8) {
      const v8 gv = load8(g + i), d8 = load8(da + n * I + i);
      const v8 s = sigmoid8(gv);
      store8(du + i, d8 * (gv * s));
      store8(dg + i, d8 * load8(u + i) * (s * (1.0f + gv * (1.0f - s))));
    }
  }
}

Tensor train_swiglu_backward(const Tensor& da, const Tensor& gu) {
  check_rows(da, "the SwiGLU's output gradient");
  check_rows(gu, "the gate/up product");
  TORCH_CHECK(gu.size(1) == 2 * da.size(1) && gu.size(0) == da.size(0),
              "fused training: the SwiGLU backward's shapes disagree");
  Tensor dgu = at::empty_like(gu);
  const int64_t N = da.size(0), I = da.size(1);
  const float *dp = da.data_ptr<float>(), *gp = gu.data_ptr<float>();
  float* op = dgu.data_ptr<float>();
  at::parallel_for(0, N, 16, [&](int64_t b, int64_t e) { swiglu_backward_rows(dp, gp, op, b, e, I); });
  return dgu;
}

}  // namespace

TORCH_LIBRARY(RAGEN2_NAMESPACE, m) {
  m.def(
      "decode_step(Tensor tokens, Tensor embed, Tensor cos_sin, Tensor[] k_caches, Tensor[] v_caches, Tensor bias, "
      "int col, Tensor[] weights, float[] eps, int hq, int hk, int d, int inter, float scale, Tensor final_norm, "
      "float final_eps, Tensor head, Tensor? slot_order) -> Tensor");
  m.impl("decode_step", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(decode_step));
  m.def(
      "decode_step_fused(Tensor tokens, Tensor embed, Tensor cos_sin, Tensor[] k_prompt, Tensor[] v_prompt, "
      "Tensor[] k_own, Tensor[] v_own, Tensor owner, Tensor bias, int width, int col, Tensor[] weights, float[] eps, "
      "int hq, int hk, int d, int inter, float scale, Tensor final_norm, float final_eps, Tensor head, "
      "Tensor? slot_order) -> Tensor");
  m.impl("decode_step_fused", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(decode_step_fused));
  m.def("train_rms_forward(Tensor h, Tensor w, float eps) -> (Tensor, Tensor)");
  m.impl("train_rms_forward", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(train_rms_forward));
  m.def("train_rms_backward(Tensor dy, Tensor h, Tensor w, Tensor r, Tensor? residual) -> (Tensor, Tensor)");
  m.impl("train_rms_backward", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(train_rms_backward));
  m.def("train_rope_split(Tensor qkv, Tensor cos, Tensor sin, int B, int T, int hq, int hk, int d) -> "
        "(Tensor, Tensor, Tensor)");
  m.impl("train_rope_split", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(train_rope_split));
  m.def("train_rope_merge(Tensor? dq, Tensor? dk, Tensor? dv, Tensor cos, Tensor sin, int B, int T, int hq, int hk, "
        "int d) -> Tensor");
  m.impl("train_rope_merge", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(train_rope_merge));
  m.def("train_swiglu_forward(Tensor gu) -> Tensor");
  m.impl("train_swiglu_forward", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(train_swiglu_forward));
  m.def("train_swiglu_backward(Tensor da, Tensor gu) -> Tensor");
  m.impl("train_swiglu_backward", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(train_swiglu_backward));
}
