#pragma once
// A kernel's declaration of what it supports as a JSON document, for kernels that have no C
// description to carry one (the file route: `attnbench cases --declare`, `attnbench check
// --declare`). It is the same declaration a plugin makes in attnbench_plugin.h, in the same
// words, read into the same attn::Capabilities, so verify projects and skips cases for it exactly
// as for a plugin:
//
//   {"schema": "attnbench.capabilities", "version": 1,      (optional; checked when present)
//    "summary": "what it is",                               (optional)
//    "operations": ["forward"],   (the default; "backward": verify --backward runs its forward, then its backward)
//    "parameter_gradients": false,   (true: its backward also writes d_sink and d_bias where a case
//                                     has sinks or a bias; Capabilities::parameter_gradients)
//    "dtypes": ["f64", "f32", "f16", "bf16"],               (required, at least one)
//    "role_dtypes": {"o": ["f32"]},   (a role's own dtypes: mixed-precision cases, e.g. f16 inputs
//                                      with an f32 output; roles q k v bias o d_o dq dk dv)
//    "layouts": ["bhsd"],
//    "masks": ["causal_top_left", "causal_bottom_right", "padding_per_batch", "padding_per_query",
//              "bool_mask", "bias", "window"],   (window: any window but causal or none)
//    "causal_only": false,   (true: every problem it runs has a causal window; cases without one are
//                             projected onto one, bottom-right where declared)
//    "default_scale_only": false,   (true: the scale is 1/sqrt(d_k), built in; cases with another
//                                    scale are projected onto the default)
//    "gqa": true, "different_dk_dv": true,
//    "head_dims": [64, 128]  or  "min_head_dim": 1, "max_head_dim": 256,
//    "fully_masked": "zeros" | "nan" | "any",   (any: those rows, and their LSE, not judged)
//    "returns_lse": false, "deterministic": true,
//    "masked_nonfinite_safe": false,
//    "matmul_unit_roundoff": 0 | 0.00048828125 (2^-11, TF32 or f16 products) | 0.00390625 (2^-8, bf16),
//    "accumulation_unit_roundoff": 0 | 0.00048828125 (2^-11, an f16 accumulator) | 0.00390625 (2^-8, bf16)}
//
// A key left out declares every mask, GQA, d_k != d_v, every head dim, any scale, BHSD, fully
// masked rows zeros, no LSE and no score modification (this format's defaults; a score
// modification, like every variant added later, is declared only by naming it). An unknown key, a wrong type or an
// unknown name is an InputError naming the key, so a typo never declares everything silently.
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "impls/implementation.hpp"

namespace attn {

// `where` prefixes every message (a file name, "the manifest's declaration").
Capabilities capabilities_from_json(const nlohmann::json& declaration, const std::string& where);
// Reads and parses a declaration file; a missing file or invalid JSON is an InputError too.
Capabilities read_capabilities_file(const std::filesystem::path& path);
// Every key written out, so that what was declared reads back unchanged and states its defaults.
nlohmann::json capabilities_to_json(const Capabilities& caps);

}  // namespace attn
