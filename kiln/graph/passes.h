// Graph passes, run in named stages by compile() (see executor.h). Each pass keeps the graph valid
// (verify() runs after each) and can be switched off through CompileOptions for bisecting.
//
// Fusions (each replaces a composition of simpler ops that stays the eager/reference path):
//   fuse_sibling_linears  Linear ops reading the same x (q/k/v, gate/up) -> one Linear + SplitColumns
//   fuse_silu_mul         Mul(SiLU(gate), up) over one fused gate_up   -> SiluMul
//   fuse_linear_epilogues SiluMul(Linear(x)), QKNormRopeCache(Linear(x), ...) with a bf16 x
//                         -> LinearSiluMul, LinearQKNormRopeCache (GEMM epilogues: the f32
//                         projection is never stored), for the ops `supported` accepts
//   fuse_qk_norm_rope     split + per-head RMSNorm + RoPE + cache writes -> QKNormRopeCache
//   fuse_residual         Add(r, Linear(x))                             -> LinearResidual (GEMM epilogue)
//   group_attention_q     (Linear)QKNormRopeCache whose q only an Attention reads writes that q
//                         grouped (bf16 [B, Hkv, T, G, D], scaled), where `takes` says the
//                         attention kernel takes it so: the operand it would make of an f32 q
//   eliminate_dead_code   drops nodes no output or side effect needs
#pragma once

#include <functional>

#include "kiln/graph/graph.h"

namespace kiln::graph {

Graph fuse_sibling_linears(const Graph& g);
Graph fuse_silu_mul(const Graph& g);
Graph fuse_linear_epilogues(const Graph& g, const std::function<bool(Op)>& supported);
Graph fuse_qk_norm_rope(const Graph& g);
Graph fuse_residual(const Graph& g);
Graph group_attention_q(const Graph& g,
                        const std::function<bool(const Graph&, const Node&)>& takes);
Graph eliminate_dead_code(const Graph& g);

}  // namespace kiln::graph
