// CPU reference attention in double precision: the oracle every kernel is checked against.
// Tensors are contiguous: Q/O (batch, seqlen_q, heads_q, head_dim), K/V (batch, seqlen_k,
// heads_kv, head_dim), LSE (batch, heads_q, seqlen_q).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace hfa::reference {

struct Shape {
  int batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 1;
  double scale = 1.0;
  bool causal = false;  // bottom-right aligned: query i sees key j iff j <= i + seqlen_k - seqlen_q
  // Sliding window (ForwardArgs::window_left/right, -1 unbounded): query i sees key j iff
  // i + seqlen_k - seqlen_q - window_left <= j <= i + seqlen_k - seqlen_q + window_right.
  int window_left = -1, window_right = -1;
  double softcap = 0;              // > 0: score = softcap * tanh(scale * q.k / softcap)
  const double* sinks = nullptr;   // (heads_q): a logit per head added to the denominator

  bool visible(int i, int j) const {
    const int64_t diag = static_cast<int64_t>(i) + seqlen_k - seqlen_q;
    if (causal && j > diag) return false;
    if (window_right >= 0 && j > diag + window_right) return false;
    return window_left < 0 || j >= diag - window_left;
  }
  // The softmax's input for a dot product q.k; its derivative is scale * softcap_grad(dot).
  double score(double dot) const { return softcap > 0 ? softcap * std::tanh(dot * scale / softcap) : dot * scale; }
  double softcap_grad(double dot) const {
    if (softcap <= 0) return 1;
    const double t = std::tanh(dot * scale / softcap);
    return 1 - t * t;
  }
  double sink(int h) const { return sinks ? sinks[h] : -HUGE_VAL; }
  int kv_head(int h) const { return h / (heads_q / heads_kv); }
  int64_t q_index(int b, int i, int h) const {
    return ((static_cast<int64_t>(b) * seqlen_q + i) * heads_q + h) * head_dim;
  }
  int64_t kv_index(int b, int j, int hk) const {
    return ((static_cast<int64_t>(b) * seqlen_k + j) * heads_kv + hk) * head_dim;
  }
  int64_t lse_index(int b, int h, int i) const {
    return (static_cast<int64_t>(b) * heads_q + h) * seqlen_q + i;
  }
};

// One query row (b, h, i): o_row[head_dim] and its LSE. A row that sees no key: O = 0, LSE = -inf
// (with sinks: LSE = the head's sink, the log of the denominator, which is the sink's term alone).
void forward_row(const Shape& s, const double* q, const double* k, const double* v, int b, int h,
                 int i, double* o_row, double* lse);

// Every row.
void forward(const Shape& s, const double* q, const double* k, const double* v, double* o,
             double* lse);

// Gradients of sum(O * dout) with respect to Q, K, V (FA2 Algorithm 2's equations:
// P = exp(S - LSE), dV = P^T dO, dP = dO V^T, D = rowsum(dO * O), dS = P * (dP - D),
// dQ = scale dS K, dK = scale dS^T Q; with softcap dS carries softcap_grad(q.k)). With GQA,
// dK/dV sum over the query heads of a KV head.
// dsinks (optional, with sinks: heads_q values): -sum over (batch, row) of exp(sink - LSE) * D.
void backward(const Shape& s, const double* q, const double* k, const double* v,
              const double* dout, double* dq, double* dk, double* dv, double* dsinks = nullptr);

enum class Precision { kBF16, kFP16 };

// float8 e4m3 (FN: no infinities, NaN = 0x7F/0xFF, max 448): every code's value, and x rounded
// to the nearest code (ties to even, saturating to +-448 as FP8 kernels convert).
double e4m3_to_double(uint8_t bits);
double round_to_e4m3(double x);

// The backward of one GQA group: the query heads that read KV head hk of batch b. Writes their dq
// rows and the group's dk, dv rows (nothing else). With lowp == nullptr in fp64; otherwise the
// tolerance baseline for gradients: the same equations as a framework runs them on bf16/fp16
// tensors (O, S, dP, P and dS rounded to the dtype where a framework materializes them, the
// gradients rounded at the end). `threads` > 1 splits rows and keys across std::threads.
// o_rounding (optional, with lowp): per element of dq and dk (their layouts, as written), a first-
// order bound on what rounding O to the dtype does to the gradient through D = rowsum(dO * O), as
// a kernel computes D from its rounded output: |dD_i| <= u sum_c |dO_ic O_ic| (u the unit
// roundoff), dq_i moves by scale dD_i sum_j P_ij K_j and dk_j by scale sum_i P_ij dD_i Q_i.
// Small where attention spreads; the size of the gradient itself where a row's mass sits on one
// key and a sink (dS = P (dP - D) = P (1 - P) dP there, which that rounding can swamp) or on a
// few keys (a causal row near the top of a problem with seqlen_q > seqlen_k).
struct RoundedOBound {
  double* dq;
  double* dk;
};
void backward_group(const Shape& s, const double* q, const double* k, const double* v,
                    const double* dout, int b, int hk, const Precision* lowp, double* dq,
                    double* dk, double* dv, int threads = 1, const RoundedOBound* o_rounding = nullptr);

// dL/dsinks (s.sinks required): -sum over (batch, row) of exp(sink_h - LSE) * rowsum(dout * O), in
// fp64 (lowp == nullptr) or from forward_row_lowp's O and LSE (the tolerance baseline).
// magnitude (optional, heads_q values): the same sum of |dout * O| terms, the scale of the error
// that rounding O to a dtype can cause (unit roundoff times it bounds it to first order).
void sink_gradient(const Shape& s, const double* q, const double* k, const double* v,
                   const double* dout, const Precision* lowp, double* dsinks, int threads = 1,
                   double* magnitude = nullptr);

// The tolerance baseline: one row of attention computed the straightforward way in low
// precision, as a framework would with bf16/fp16 tensors: scores accumulated in fp32 and rounded
// to the dtype, softmax in fp32, P rounded to the dtype, P V accumulated in fp32 and rounded.
// Its error against forward_row() is what a kernel's error is measured against.
double round_to(Precision p, double x);
void forward_row_lowp(const Shape& s, Precision p, const double* q, const double* k,
                      const double* v, int b, int h, int i, double* o_row, double* lse);

// The FP8 yardstick (issue 19, FlashAttention-3's baseline): the straightforward FP8 attention of
// one row on the same quantized inputs (q, k, v here already dequantized: e4m3 value x descale):
// scores accumulated in fp32, softmax in fp32, P in [0, 1] rounded to e4m3, P V accumulated in
// fp32, O rounded to `out`. A kernel's error is measured against its error.
void forward_row_fp8_baseline(const Shape& s, Precision out, const double* q, const double* k,
                              const double* v, int b, int h, int i, double* o_row, double* lse);

}  // namespace hfa::reference
