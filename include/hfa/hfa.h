// hfa: exact attention (FlashAttention) for NVIDIA GPUs. The one public header.
//
//   O   = softmax(scale * Q K^T + mask) V
//   LSE = log(sum_j exp(scale * Q K^T + mask))          (natural log, one value per query row)
//
// Tensors are described, not owned: a pointer to device memory plus dtype, shape and strides
// (in elements). Attention tensors use (batch, seqlen, heads, head_dim) order with head_dim
// contiguous (stride 1); the other strides are free, so slices of a packed QKV buffer work.
//
// Example (bf16, contiguous):
//   hfa::ForwardArgs args;
//   args.q   = hfa::make_tensor(q_ptr, hfa::DType::kBF16, {batch, seqlen_q, heads_q, head_dim});
//   args.k   = hfa::make_tensor(k_ptr, hfa::DType::kBF16, {batch, seqlen_k, heads_kv, head_dim});
//   args.v   = hfa::make_tensor(v_ptr, hfa::DType::kBF16, {batch, seqlen_k, heads_kv, head_dim});
//   args.out = hfa::make_tensor(o_ptr, hfa::DType::kBF16, {batch, seqlen_q, heads_q, head_dim});
//   args.causal = true;
//   hfa::Status st = hfa::forward(args, stream);
//   if (!st.ok()) fprintf(stderr, "%s\n", st.message.c_str());
//
// Every argument is validated before anything is launched; on an error nothing is written.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace hfa {

// ---- Status -------------------------------------------------------------------------------------

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // an argument breaks a rule; the message names the argument and the rule
  kUnsupported,      // valid arguments, but the chosen kernel (or this GPU) cannot run them
  kNoDevice,         // no usable CUDA device
  kOutOfMemory,      // a kernel's workspace does not fit in device memory
  kCudaError,        // a CUDA call or launch failed
};

struct Status {
  StatusCode code = StatusCode::kOk;
  std::string message;  // empty when ok

  bool ok() const { return code == StatusCode::kOk; }
  static Status Ok() { return {}; }
};

const char* to_string(StatusCode code);

// ---- Tensors ------------------------------------------------------------------------------------

enum class DType {
  kBF16,
  kFP16,
  kFP32,  // LSE, descale factors, merge parts, the backward's dq/dk/dv; not Q/K/V/O
  kE4M3,  // float8 e4m3 (torch.float8_e4m3fn): Q/K/V of the FP8 forward (k7, k8); needs descales
  kI32,   // int32: decode's cache_seqlens, page_table and cache_batch_idx; not accepted elsewhere
};

// FP8 block quantization (k8, quantize_fp8): one descale per this many query rows, and per this
// many keys.
inline constexpr int kFp8ScaleBlock = 128;

const char* to_string(DType dtype);
int size_of(DType dtype);  // bytes per element

inline constexpr int kMaxRank = 5;  // merge_attention's stacked partial results are rank 5

// A non-owning view of device memory. shape and stride are in elements; entries past `rank`
// are ignored. A tensor with zero elements may have a null data pointer.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kBF16;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> stride{};

  int64_t numel() const;
};

// Packed (row-major, last dimension contiguous) view.
TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape);
// View with explicit strides (elements), e.g. a slice of a packed QKV buffer.
TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                       std::initializer_list<int64_t> stride);

// ---- Forward ------------------------------------------------------------------------------------

// Arguments of the forward pass. Fields will only ever be added (with defaults that keep today's
// behaviour), so code that sets fields by name keeps compiling and meaning the same thing.
struct ForwardArgs {
  // (batch, seqlen_q, heads_q, head_dim), dtype bf16, fp16 or e4m3. Read only.
  TensorView q;
  // (batch, seqlen_k, heads_kv, head_dim), same dtype as q. heads_q must be a multiple of
  // heads_kv: heads_kv == heads_q is MHA, 1 < heads_kv < heads_q is GQA, heads_kv == 1 is MQA.
  // Query head h reads KV head h / (heads_q / heads_kv).
  TensorView k;
  TensorView v;
  // (batch, seqlen_q, heads_q, head_dim), same dtype as q; with e4m3 inputs bf16 or fp16 (the
  // caller's choice). Written.
  TensorView out;
  // Optional: fp32 (batch, heads_q, seqlen_q), natural-log sum of exponentials of each query row
  // (what a backward pass needs). Leave data == nullptr to skip it. A row that sees no key gets
  // -inf (and its output row is 0).
  TensorView lse;

  // Multiplies Q K^T before the softmax. Default: 1 / sqrt(head_dim).
  std::optional<float> softmax_scale;

  // Causal mask. With seqlen_q != seqlen_k it is aligned to the bottom-right corner (as in
  // FlashAttention 2.1+): query i sees key j iff j <= i + (seqlen_k - seqlen_q). Query rows that
  // see no key at all (possible when seqlen_q > seqlen_k) produce O = 0 and LSE = -inf.
  bool causal = false;

  // Which kernel runs: a name from list_kernels() ("k1", "k2", ...), or "auto" for the fastest
  // kernel that supports these arguments on this GPU. Naming a kernel that cannot run these
  // arguments is an error, never a silent fallback.
  std::string kernel = "auto";

  // FP8 (e4m3 q, k, v) only, and then all three required (q_descale and k_descale unless the
  // block descales below are given; v_descale always): fp32 (batch, heads_kv) dequantization
  // factors, as FlashAttention-3 takes them: the real Q of query head h in batch b is
  // q * q_descale[b][h / (heads_q / heads_kv)], K is k * k_descale[b][h_kv], V is
  // v * v_descale[b][h_kv]. Any strides. Their values are read on the device and not checked: a
  // non-finite or zero descale gives what the arithmetic gives. With bf16/fp16 inputs they must
  // be left empty (data == nullptr).
  // Accuracy of FP8 on Hopper: the e4m3 tensor cores keep about 13 bits when they accumulate, so
  // Q K^T loses up to ~2^-9 of sum |q k| per score when the products share a sign or have outlier
  // channels (quantize_fp8's Hadamard transform and mean key reduce both); P V is accumulated per
  // KV tile and added to O in fp32, so it stays accurate over any number of keys (accumulated in
  // the tensor cores alone, O was off by 26% over 16k keys of one-sign V; docs/WORKLOG.md, K7).
  TensorView q_descale, k_descale, v_descale;

  // FP8 block quantization (the kernel k8), instead of q_descale and k_descale (which must then
  // be empty; v_descale stays per (batch, heads_kv)): fp32 (batch, heads_q, ceil(seqlen_q / 128))
  // and fp32 (batch, heads_kv, ceil(seqlen_k / 128)), any strides (k_block_descale's last block
  // within 2^31 elements of its first: k8 indexes blocks in 32 bits). Query row i of head h in batch
  // b is q * q_block_descale[b][h][i / 128]; key j of KV head hk is k * k_block_descale[b][hk][j / 128]
  // (kFp8ScaleBlock = 128). Both or neither. quantize_fp8(..., block = true) writes them.
  TensorView q_block_descale, k_block_descale;

  // Sliding window (local attention), FlashAttention's semantics: query i sees key j iff
  //   i + (seqlen_k - seqlen_q) - window_left <= j <= i + (seqlen_k - seqlen_q) + window_right,
  // -1 meaning unbounded on that side (both -1: no window). With causal, window_right must be -1
  // or 0 (causal is window_right = 0); (-1, 0) is the causal mask itself. KV tiles wholly outside
  // a query tile's window are never loaded. A row that sees no key gets O = 0, LSE = -inf.
  int window_left = -1, window_right = -1;

  // Softcap (Gemma 2): when > 0 the scores become softcap * tanh(softmax_scale * q.k / softcap)
  // before the softmax (softmax_scale applies inside the tanh). 0: off. Finite, >= 0.
  float softcap = 0.f;

  // Attention sinks (gpt-oss): optional fp32 (heads_q), any stride, one learned logit per query
  // head added to each row's softmax denominator (not to the output):
  //   O_i = sum_j exp(s_ij) V_j / (exp(sinks[h]) + sum_j exp(s_ij)),  s_ij the scaled score,
  // and LSE the log of that denominator (so a row that sees no key gets O = 0, LSE = sinks[h]).
  TensorView sinks;

  // Variable-length batches (packed sequences; FlashAttention's flash_attn_varlen_func): when
  // cu_seqlens_q and cu_seqlens_k are given (both or neither), q and out are (total_q, heads_q,
  // head_dim), k and v (total_k, heads_kv, head_dim) and lse (heads_q, total_q), and the batch is
  // cu_seqlens_q's size - 1 sequences. Sequence b's queries are rows [cu_seqlens_q[b],
  // cu_seqlens_q[b + 1]) of q and out, its keys rows [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k
  // and v (only the first seqused_k[b] of those when seqused_k is given). Causal masks, windows,
  // softcap and sinks apply within each sequence, aligned to its own lengths (bottom-right).
  // int32, shape (batch + 1), contiguous. Their values are read on the device and not checked:
  // they must start at 0 and not decrease; each is clamped to [0, total] there, so nothing outside
  // the tensors is read or written whatever they hold. Rows of out between sequences (none when
  // cu_seqlens_q ends at total_q) are not written.
  // Rows of k and v past a sequence's keys may be read (with weight 0) by its last KV tile: they
  // must hold finite values (any of q's rows does; mind uninitialized rows past seqused_k).
  TensorView cu_seqlens_q, cu_seqlens_k;
  // With cu_seqlens: upper bounds of every sequence's query and key count (the grid is sized by
  // them). Not checked against the device values: a longer sequence is cut to max_seqlen_q
  // queries (its rows past it are not written) and max_seqlen_k keys. >= 0.
  int max_seqlen_q = 0, max_seqlen_k = 0;
  // Optional with cu_seqlens: int32 (batch), contiguous; sequence b attends to its first
  // seqused_k[b] keys only (clamped to [0, its key count] on the device).
  TensorView seqused_k;
};

// Runs attention forward on `stream`. Asynchronous like a kernel launch: returns after the launch.
// Sizes of zero (batch == 0 or seqlen_q == 0) are valid and launch nothing. seqlen_k == 0 with
// seqlen_q > 0 is valid: every row sees no key, so O = 0 and LSE = -inf.
Status forward(const ForwardArgs& args, cudaStream_t stream = nullptr);

// ---- FP8 quantization ---------------------------------------------------------------------------

// Arguments of quantize_fp8: bf16/fp16 Q, K, V in; the e4m3 tensors and descales the FP8 forward
// takes out (k7 with block = false, k8 with block = true). Each scale group (a (batch, KV head)
// for Q with all its query heads, K and V; or a 128-row block of one head) is scaled so that its
// largest |value| becomes 448 (e4m3's largest finite): e4m3 = round(x * 448 / amax) (saturating),
// descale = amax / 448 (0 for a group of zeros). Inputs must be finite.
struct QuantizeFp8Args {
  // bf16 or fp16 (all three the same), shapes and stride rules as ForwardArgs's q, k, v. Read only.
  TensorView q, k, v;
  // e4m3, the shapes of q, k, v; head_dim contiguous, other strides free. Written.
  TensorView q_out, k_out, v_out;
  // fp32, written, any strides. block == false: q_descale, k_descale, v_descale are (batch,
  // heads_kv) (ForwardArgs::q_descale, k_descale, v_descale). block == true: q_descale is
  // (batch, heads_q, ceil(seqlen_q / 128)) and k_descale (batch, heads_kv, ceil(seqlen_k / 128))
  // (ForwardArgs::q_block_descale, k_block_descale); v_descale stays (batch, heads_kv).
  TensorView q_descale, k_descale, v_descale;
  // One scale per 128 rows of each head of Q and K (kFp8ScaleBlock) instead of per (batch, KV head).
  bool block = false;
  // Incoherent processing: Q and K (not V) times the same orthogonal H = W diag(signs) / sqrt(d)
  // along head_dim (W: the Walsh-Hadamard matrix; signs: random +-1 from hadamard_seed), which
  // spreads outlier channels over all of them. (Q H)(K H)^T = Q K^T, so attention's result is the
  // same; only the quantization error changes.
  bool hadamard = false;
  uint64_t hadamard_seed = 0;
  // Subtracts each (batch, KV head)'s mean key (over seqlen_k) from K before quantizing. The
  // output O is unchanged (it adds scale * q . mean to a whole score row), but the LSE of row q
  // is lowered by softmax_scale * q . mean: use it only when the LSE is not needed.
  bool subtract_mean_key = false;
};

// Runs the quantization on `stream` (asynchronous). Validated like forward(): an error names the
// argument and the rule, and nothing is launched or written. Takes a stream-ordered fp32
// workspace (from hfa's pool: "Workspace memory" below) of a few bytes per row block and per
// (batch, KV head, channel).
// head_dim 64, 128 or 256 (a power of two, for the Walsh-Hadamard transform).
Status quantize_fp8(const QuantizeFp8Args& args, cudaStream_t stream = nullptr);

// ---- Decode: attention of a few new tokens to a KV cache (flash decode) ------------------------

// The arguments of decode(), the shape of FlashAttention's flash_attn_with_kvcache. Each query
// row (b, i, h) attends to the first n_b keys of its sequence's cache, n_b = cache_seqlens[b] +
// seqlen_new (the cached keys, then the appended ones, if any). The KV sequence is split across
// CTAs (num_splits) and the partial results merged exactly: inside the split kernel after a
// grid-wide barrier when the GPU holds all its CTAs at once and each output row has a warp or CTA
// of its own (one cooperative launch per call; a CUDA graph captures it as one kernel node), else
// by a second kernel; both give the same bits.
// The query heads that share a KV head are rows of one tile, so every key is read from memory once.
struct DecodeArgs {
  // (batch, seqlen_q, heads_q, head_dim), bf16 or fp16, head_dim 64, 128 or 256. Read only.
  // Built for seqlen_q <= 16 (new tokens, speculative decoding); longer queries work but read the
  // cache once per 16 packed rows (seqlen_q x heads_q / heads_kv): use forward() for a prefill.
  TensorView q;
  // The cache, q's dtype or e4m3 (an FP8 cache: half the bytes to read; needs k_descale and
  // v_descale; inside the kernel its values are converted exactly to fp16, and a bf16 q is
  // converted to fp16 with each row scaled by a power of two: exact but for values below 2^-28
  // of the row's largest), either
  //   contiguous: (batch_cache, capacity, heads_kv, head_dim): sequence b is k_cache[b] (or
  //     k_cache[cache_batch_idx[b]]); its capacity is the second dimension;
  //   paged (page_table given): (num_pages, page_size, heads_kv, head_dim), page_size a power of
  //     two: key j of sequence b lives in page page_table[b][j / page_size], slot j % page_size;
  //     the capacity is page_table's width times page_size. Speed: pages of 64 keys or more (32
  //     for a bf16/fp16 cache at head_dim 128 / 256 and an e4m3 one at 256) are read as a
  //     contiguous cache is, one page-table lookup per page; smaller pages take a lookup per key
  //     row (H200, batch 64 x 16k, head_dim 128: bf16 pages of 16 ~2% slower than pages of 64,
  //     e4m3 ~10%; docs/PERFORMANCE.md).
  // head_dim contiguous, other strides free. Written only when k_new / v_new are given.
  TensorView k_cache, v_cache;
  // int32 (batch): keys already cached per sequence, 0 .. capacity - seqlen_new. Read on the
  // device, not checked there (a value outside that range is clamped to it; the result is then
  // not meaningful, but nothing outside the cache is read or written).
  TensorView cache_seqlens;
  // Optional int32 (batch, max_pages_per_seq): the paged cache's page indices, each in
  // [0, num_pages) for the pages a sequence uses (device values, not checked; the rest of a row
  // is never read; with a sliding window, neither are the entries of the pages wholly before the
  // first query token's window, which an engine may have freed).
  TensorView page_table;
  // Optional int32 (batch), contiguous cache only: sequence b uses cache row cache_batch_idx[b]
  // (device values in [0, batch_cache), not checked).
  TensorView cache_batch_idx;
  // Optional, both or neither: (batch, seqlen_new, heads_kv, head_dim), the cache's dtype. Written into
  // the cache at positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 before attending
  // (in place; cache_seqlens itself is not changed: the caller advances it).
  TensorView k_new, v_new;
  // (batch, seqlen_q, heads_q, head_dim), q's dtype. Written.
  TensorView out;
  // Optional fp32 (batch, heads_q, seqlen_q): natural-log sum of exponentials per query row;
  // -inf (and O = 0) for a row that sees no key.
  TensorView lse;
  // e4m3 caches only, and then both required: fp32 (batch, heads_kv), any strides. Key j of
  // sequence b, KV head h stands for k_cache's e4m3 value times k_descale[b][h] (V likewise),
  // FlashAttention-3's convention for flash_attn_with_kvcache (indexed by the query's batch row b,
  // also with cache_batch_idx).
  TensorView k_descale, v_descale;

  std::optional<float> softmax_scale;  // default 1 / sqrt(head_dim)
  // Bottom-right causal mask: query i sees key j iff j <= i + n_b - seqlen_q (new token i sees
  // the cache and the new tokens up to itself).
  bool causal = false;
  // Splits of each sequence's keys across CTAs, 1 .. 256; 0 lets plan_decode() choose (from the
  // shapes and the GPU's SM count: docs/WORKLOG.md, "Flash decode").
  int num_splits = 0;

  // The score variants, as ForwardArgs has them (Mistral's and gpt-oss's sliding windows,
  // Gemma 2's softcap, gpt-oss's sinks), with n_b keys in place of seqlen_k:
  // Sliding window: query i sees key j iff
  //   i + n_b - seqlen_q - window_left <= j <= i + n_b - seqlen_q + window_right,
  // -1 unbounded on that side (both -1: no window). With causal, window_right must be -1 or 0;
  // (-1, 0) is the causal mask itself. The splits share out the keys the window leaves (a window
  // of 4096 over a 64k cache reads ~4096 keys per sequence), and plan_decode() counts only those.
  int window_left = -1, window_right = -1;
  // > 0: scores become softcap * tanh(softmax_scale * q.k / softcap). 0: off. Finite, >= 0.
  float softcap = 0.f;
  // Optional fp32 (heads_q), any stride: a logit per query head added to each row's softmax
  // denominator (not to the output); a row that sees no key gets O = 0, LSE = sinks[h].
  TensorView sinks;
};

// What plan_decode() computes on the host: the split count and the workspace size, for one set of
// shapes. It is reusable for every call with the same shapes (the layers of a decode step, the
// replays of a CUDA graph); decode() checks that the shapes match.
struct DecodePlan {
  int num_splits = 0;
  size_t workspace_bytes = 0;  // fp32 partial O and LSE per split (0 when num_splits == 1)
  // The shapes it was made for.
  int batch = 0, seqlen_q = 0, heads_q = 0, heads_kv = 0, head_dim = 0, seqlen_new = 0;
  int64_t capacity = 0;
  bool paged = false;
  DType dtype = DType::kBF16, cache_dtype = DType::kBF16;
  int device = -1, cc = 0;
};

// Validates `args` and fills `plan` (host only: reads no device memory, launches nothing).
Status plan_decode(const DecodeArgs& args, DecodePlan* plan);

// Runs a planned decode on `stream`: no host synchronization, no allocation, so it can be
// captured in a CUDA graph and replayed with new cache_seqlens and page tables (same pointers).
// `workspace` is device memory of at least plan.workspace_bytes, not used by anything else
// until the work on `stream` is done. args.num_splits is ignored (the plan's count is used).
Status decode(const DecodeArgs& args, const DecodePlan& plan, void* workspace,
              size_t workspace_bytes, cudaStream_t stream = nullptr);

// Plans and runs in one call, with a stream-ordered workspace (hfa's pool, below; freed on the
// stream). Convenient, but it allocates: use the planned form inside graphs and hot loops.
Status decode(const DecodeArgs& args, cudaStream_t stream = nullptr);

// ---- Merging partial attention results ---------------------------------------------------------

// Attention over a union of disjoint key sets, from the results over each set (flash decode's
// splits, context parallelism's blocks of keys held by other GPUs): with O_i, LSE_i a query row's
// output and log-sum-exp over key set i,
//   LSE = log sum_i exp(LSE_i),   O = sum_i exp(LSE_i - LSE) O_i,
// computed exactly in fp32. A part with LSE_i = -inf saw no key and its O_i is not read (it may
// hold anything, NaN included); a row whose every part saw no key gets O = 0, LSE = -inf.
struct MergeArgs {
  // (num_parts, batch, seqlen, heads, head_dim), fp32, bf16 or fp16; head_dim 64, 128 or 256 and
  // contiguous; the data pointer and every other stride a multiple of 4 elements (rows are read
  // 4 elements at a time). 1 <= num_parts <= 256. Read only.
  TensorView o_parts;
  // fp32 (num_parts, batch, heads, seqlen), any strides (ForwardArgs::lse's layout per part).
  TensorView lse_parts;
  // (batch, seqlen, heads, head_dim), fp32, bf16 or fp16 (any of them, whatever o_parts's dtype);
  // the alignment rule of o_parts. Written. It may be one of the parts (o_parts[i] itself, same
  // pointer and strides), for a running merge in place; it must not overlap them otherwise.
  TensorView out;
  // Optional fp32 (batch, heads, seqlen), any strides: the merged LSE. Written; like out, it may
  // be one of lse_parts's parts.
  TensorView lse;
};

// Runs the merge on `stream` (asynchronous). Validated like forward(): an error names the argument
// and the rule, and nothing is launched or written. num_parts == 0 is an error (there is no
// result to merge); batch, seqlen or heads of 0 launch nothing.
Status merge_attention(const MergeArgs& args, cudaStream_t stream = nullptr);

// ---- Backward -----------------------------------------------------------------------------------

// Arguments of the backward pass: the gradients of a loss L with respect to q, k and v, given
// dout = dL/dout and what the forward pass returned (out and lse). Same shape and stride rules as
// ForwardArgs; every tensor must have q's dtype except lse (fp32) and the gradients: dq, dk and
// dv have q's dtype, or all three fp32 (the kernels' fp32 sums unrounded: for a caller that adds
// gradients of several backward calls, as ring attention does per key block, and rounds once).
struct BackwardArgs {
  TensorView q, k, v;  // the forward's inputs. Read only.
  TensorView out;      // the forward's output (batch, seqlen_q, heads_q, head_dim). Read only.
  TensorView dout;     // dL/dout, same shape as out. Read only.
  // fp32 (batch, heads_q, seqlen_q): the forward's LSE. Required (the backward recomputes
  // P = exp(scale * Q K^T - LSE) from it instead of storing P).
  TensorView lse;
  TensorView dq;  // written: shape of q
  TensorView dk;  // written: shape of k. With GQA/MQA, the sum over the query heads sharing it.
  TensorView dv;  // written: shape of v (the same sum)

  // Must be what the forward used. Default: 1 / sqrt(head_dim).
  std::optional<float> softmax_scale;
  // Must be what the forward used (same bottom-right alignment).
  bool causal = false;
  // Must be what the forward used (ForwardArgs::window_left, window_right, softcap, sinks,
  // and the variable-length batch's cu_seqlens_q ... seqused_k; then out, dout, dq are
  // (total_q, heads_q, head_dim), dk and dv (total_k, heads_kv, head_dim), lse (heads_q, total_q)).
  // With a variable-length batch, dk and dv are zero in a sequence's rows past seqused_k, and
  // dq, dk, dv in the rows past the last sequence (past cu_seqlens_q[batch] / cu_seqlens_k[batch],
  // batch >= 1): no score reaches them. As
  // for the forward, rows of q, k, v and dout past a sequence's end may be read (with weight 0)
  // by its last tiles: they must hold finite values.
  int window_left = -1, window_right = -1;
  float softcap = 0.f;
  TensorView sinks;
  TensorView cu_seqlens_q, cu_seqlens_k;
  int max_seqlen_q = 0, max_seqlen_k = 0;
  TensorView seqused_k;
  // Optional with sinks (refused without): fp32 (heads_q), any stride, written: dL/dsinks, the
  // sum over batch and rows of -exp(sinks[h] - LSE_i) * rowsum(dout_i * out_i).
  TensorView dsinks;
  // A name from list_backward_kernels(), or "auto": bwd_sm90 on Hopper (every head dim, every
  // variant), fa2 on other GPUs and for the deterministic mode where fa2's measured faster (512
  // keys but bwd_sm90's launch order and head_dim 256; under the causal mask below 2k keys).
  // Variable-length batches: bwd_sm90 (Hopper) and fa2 (sm80+), both with every variant.
  std::string kernel = "auto";
  // dq, dk and dv bit-identical from run to run, whatever the number of SMs free for the launch.
  // dk and dv are always so (summed on chip in a fixed order); dq is summed over the KV blocks in
  // fp32, which by default happens in whatever order the blocks finish. Deterministic mode, slower
  // (docs/PERFORMANCE.md has the cost): bwd_sm90 sums dq in 64-bit fixed point
  // (each row's contributions scaled by a power of two from a bound on them, 4 ||dout_i||_1 max|k|
  // max|v|, to within 2^-55 of it: integer sums in any order give the same bits; finer than an
  // fp32 sum's unless the bound exceeds the row's dq by ~2^30), with an int64 accumulator (twice
  // the fp32 one) and batch * heads_q * (seqlen_q rounded up to 128) more floats of workspace --
  // except for short sequences of many heads (seqlen_q * head_dim <= 32768, batch * heads_kv
  // filling 3/4 of 132 SMs' waves), where it runs the default kernel once per KV block index
  // and the stream's order orders the fp32 sums (the default workspace); which of the two depends
  // on the shapes alone, not on the GPU. fa2 adds each Q block's dq in KV-block order (each waits
  // for the previous block's turn), with batch * heads_q * ceil(seqlen_q / 64) * 8 more int32.
  bool deterministic = false;
};

// Runs attention backward on `stream` (asynchronous). The kernel takes a stream-ordered fp32
// workspace of batch * heads_q * (seqlen_q * head_dim + 2 * seqlen_q rounded up to a multiple of
// 128) * 4 bytes, the same for every backward kernel, from hfa's pool ("Workspace memory" below)
// and freed on the stream (the deterministic mode's workspace differs: above);
// kOutOfMemory if it does not fit. Rows that saw no key (lse = -inf) get no gradient.
// batch == 0 launches nothing; seqlen_q == 0 gives dk = dv = 0, seqlen_k == 0 gives dq = 0.
Status backward(const BackwardArgs& args, cudaStream_t stream = nullptr);

// ---- Kernels ------------------------------------------------------------------------------------

struct KernelInfo {
  std::string name;         // what ForwardArgs::kernel accepts
  std::string description;  // one line: what the kernel is
  std::string supports;     // one line: dtypes, head dims, features, architectures
  bool fp8 = false;         // takes e4m3 Q/K/V (and only those); the others take bf16/fp16
  // fp8 kernels: takes q_block_descale/k_block_descale (k8) instead of q_descale/k_descale (k7).
  bool fp8_block_scales = false;
  // Takes ForwardArgs::window_left/right, softcap, sinks (BackwardArgs's for backward kernels).
  // A kernel without them refuses such arguments by name.
  bool window = false, softcap = false, sinks = false;
  // Takes variable-length batches (cu_seqlens_q, cu_seqlens_k, seqused_k).
  bool varlen = false;
};

// Every kernel this build contains, in the order of the ladder.
std::vector<KernelInfo> list_kernels();
// Every backward kernel (what BackwardArgs::kernel accepts).
std::vector<KernelInfo> list_backward_kernels();

// The kernel "auto" would run for these arguments on the current device, or an error saying why
// none can (the same validation as forward, without launching anything).
Status select_kernel(const ForwardArgs& args, std::string* kernel_name);
// The same for the backward: the kernel BackwardArgs::kernel ("auto": the fastest that takes the
// problem; on Hopper bwd_sm90, fa2 for the deterministic mode where it is faster) would run,
// or why none can.
Status select_backward_kernel(const BackwardArgs& args, std::string* kernel_name);

// ---- Workspace memory ---------------------------------------------------------------------------

// The kernels' stream-ordered workspaces (backward's fp32 dQ accumulator, above; forward's tile
// counters and plans; quantize_fp8's and decode's scratch) come from a memory pool of hfa's own on
// the current device, which keeps freed memory for the next call instead of returning it to the
// driver at every synchronization (the default pool of cudaMallocAsync does, and a training loop
// that synchronizes each step then paid for mapping the backward's workspace anew each time). The
// pool holds at most what the calls in flight at once needed; it is not part of other allocators'
// accounting (torch.cuda.memory_allocated, for instance).
// Bytes the current device's pool holds (in use or kept), 0 before hfa's first workspace there.
Status workspace_memory_reserved(size_t* bytes);
// Returns the current device's kept workspace memory to the driver (what calls in flight use stays).
Status release_workspace_memory();

}  // namespace hfa
