// oneDNN plumbing shared by the CPU GEMM paths (see linear_dnnl.h).
#include "kiln/backends/cpu/linear_dnnl.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/memory.h"

namespace kiln::cpu::detail {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

const CachedMatmul& MatmulCache::get(const std::string& key,
                                     const std::function<dnnl::matmul::primitive_desc()>& make) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) return *it->second;
  auto m = std::make_unique<CachedMatmul>();
  m->pd = make();
  m->prim = dnnl::matmul(m->pd);
  m->scratch_bytes = m->pd.scratchpad_desc().get_size();
  // Entries are never erased, so the returned reference stays valid after the lock is released.
  return *map_.emplace(key, std::move(m)).first->second;
}

size_t MatmulCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

MatmulCache& matmul_cache() {
  static MatmulCache cache;
  return cache;
}

namespace {
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
struct ScratchSlot {
  std::unique_ptr<void, AlignedFree> ptr;
  size_t bytes = 0;
};
}  // namespace

bool gemm_onednn_only() {
  static const bool set = std::getenv("KILN_GEMM_ONEDNN") != nullptr;
  return set;
}

void* thread_scratch(int slot, size_t bytes) {
  thread_local std::vector<ScratchSlot> slots;
  if (size_t(slot) >= slots.size()) slots.resize(slot + 1);
  ScratchSlot& s = slots[slot];
  if (s.bytes < bytes) {
    size_t n = (bytes + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(64, n);
    KILN_CHECK(p != nullptr, "scratch allocation of ", n, " bytes failed");
    s.ptr.reset(p);
    s.bytes = n;
  }
  return s.ptr.get();
}

void run_matmul(const CachedMatmul& m, std::unordered_map<int, dnnl::memory> args) {
  thread_local dnnl::stream stream(dnnl_engine());
  if (m.scratch_bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(m.pd.scratchpad_desc(), dnnl_engine(),
                              thread_scratch(0, m.scratch_bytes)));
  }
  m.prim.execute(stream, args);
  stream.wait();
}

void run_strided_matmul(const std::string& key, const dnnl::memory::desc& a, const void* pa,
                        const dnnl::memory::desc& b, const void* pb, const dnnl::memory::desc& c,
                        void* pc, float beta) {
  uint32_t beta_bits;
  std::memcpy(&beta_bits, &beta, 4);
  const auto& mm = matmul_cache().get(key + ",beta" + std::to_string(beta_bits), [&] {
    dnnl::post_ops po;
    if (beta != 0.f) po.append_sum(beta);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, dnnl_engine());
  });
  auto& eng = dnnl_engine();
  run_matmul(mm, {{DNNL_ARG_SRC, dnnl::memory(a, eng, const_cast<void*>(pa))},
                  {DNNL_ARG_WEIGHTS, dnnl::memory(b, eng, const_cast<void*>(pb))},
                  {DNNL_ARG_DST, dnnl::memory(c, eng, pc)}});
}

bool onednn_has_bf16() {
  static const bool has = [] {
    try {
      using dnnl::memory;
      const memory::desc a({4, 32}, memory::data_type::bf16, memory::format_tag::ab);
      const memory::desc b({32, 4}, memory::data_type::bf16, memory::format_tag::ab);
      const memory::desc c({4, 4}, memory::data_type::f32, memory::format_tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), dnnl_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;  // "could not create a primitive descriptor iterator"
    }
  }();
  return has;
}

dnnl::memory::data_type to_dnnl(DType t) {
  switch (t) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    default: KILN_CHECK(false, "no oneDNN type for dtype ", dtype_name(t));
  }
  return dnnl::memory::data_type::undef;
}

HugeBuffer::HugeBuffer(size_t n) : ptr(map_pages(n)), bytes(n) {}

HugeBuffer::~HugeBuffer() { unmap_pages(ptr, bytes); }

}  // namespace kiln::cpu::detail
