// The binding's per-call host work, on CPU tensors: flash_api.cpp's check_qkv (its message strings
// built on every call), the variant name and its lookup in the table, two outputs allocated, the
// params' strides read, the result list, through a pybind11 def with flash_attn_func's arguments.
#define AT_PER_OPERATOR_HEADERS
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>
#include <cmath>
#include <string>
#include <vector>

namespace {
constexpr const char* kVariants[] = {"fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_causal_sm90", "bwd_hdim64_fp16_sm90",
                                     "bwd_hdim64_fp16_causal_sm90", "splitkv_hdim64_fp16_sm90", "splitkv_hdim64_fp16_causal_sm90"};
void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::string& k_name = "k",
               const std::string& v_name = "v", bool same_batch = true) {
  const std::string qkv = "q, " + k_name + " and " + v_name, kv = k_name + " and " + v_name;
  TORCH_CHECK(q.device() == k.device() && q.device() == v.device(), "flashbuild: ", qkv,
              " must be on the same device (got ", q.device(), ", ", k.device(), ", ", v.device(), "); move ", kv,
              " with .to(q.device)");
  const auto dt = q.scalar_type();
  TORCH_CHECK(dt == at::kHalf || dt == at::kBFloat16, "flashbuild: q must be float16 or bfloat16, got ", dt);
  TORCH_CHECK(k.scalar_type() == dt && v.scalar_type() == dt, "flashbuild: ", qkv, " must share one dtype (got ",
              dt, ", ", k.scalar_type(), ", ", v.scalar_type(), "); convert ", kv, " with .to(q.dtype)");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "flashbuild: ", qkv,
              " must be 4-D (batch, seqlen, nheads, head_dim); got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK((!same_batch || q.size(0) == k.size(0)) && k.sizes() == v.sizes(), "flashbuild: ", kv,
              " must have the same shape", (same_batch ? " and the batch of q" : ""), "; got q ", q.sizes(), ", ",
              k_name, " ", k.sizes(), ", ", v_name, " ", v.sizes());
  TORCH_CHECK(q.size(3) == k.size(3), "flashbuild: q and ", k_name, " must have the same head dim");
  TORCH_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0, "flashbuild: heads");
  TORCH_CHECK(q.size(3) > 0 && q.size(3) <= 256, "flashbuild: head dim must be in 1..256, got ", q.size(3));
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->stride(-1) == 1, "flashbuild: the last dimension of ", qkv, " must be contiguous (got strides ",
                t->strides(), ")");
  }
}
std::string variant_name(const char* direction, int hdim, const char* dtype, bool causal, int arch) {
  return std::string(direction) + "_hdim" + std::to_string(hdim) + "_" + dtype + (causal ? "_causal" : "") + "_sm" +
         std::to_string(arch);
}
bool holds(const std::string& name) {
  for (const char* v : kVariants) if (name == v) return true;
  return false;
}
struct Strides { int64_t batch, row, head; };
Strides strides_of(const at::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }
std::vector<at::Tensor> mha_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                std::optional<double> softmax_scale) {
  check_qkv(q, k, v);
  TORCH_CHECK(holds(variant_name("fwd", 64, "fp16", causal, 90)), "not built");
  const float scale = softmax_scale ? float(*softmax_scale) : 1.0f / std::sqrt(float(q.size(-1)));
  const int batch = q.size(0), seqlen_q = q.size(1), nheads = q.size(2);
  const at::Tensor out = at::empty({batch, seqlen_q, nheads, q.size(3)}, q.options());
  at::Tensor lse = at::empty({batch, nheads, seqlen_q}, q.options().dtype(at::kFloat));
  volatile int64_t sink = 0;
  for (const at::Tensor* t : {&q, &k, &v, &out}) { const Strides s = strides_of(*t); sink = sink + s.batch + s.row + s.head; }
  sink = sink + int64_t(scale);
  return {out, lse};
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def(
      "flash_attn_func",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, std::optional<double> softmax_scale,
         bool return_lse, int64_t window_size_left, int64_t window_size_right, double softcap) -> py::object {
        auto r = mha_fwd(q, k, v, causal, softmax_scale);
        if (return_lse) return py::make_tuple(r[0], r[1]);
        return py::cast(r[0]);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = false, py::arg("softmax_scale") = py::none(),
      py::arg("return_lse") = false, py::arg("window_size_left") = -1, py::arg("window_size_right") = -1,
      py::arg("softcap") = 0.0);
}
