#pragma once
// The host shim of a typed entry point: the code compiled right after a family's source, in the
// same translation unit, that adapts the runners' calling convention
//   extern "C" void ktune_shim_<function>(void** args)   (one pointer per spec arg)
// to the typed call the declaration names, e.g. gemm_blocked(const float*, ..., int M, ...).
// A buffer's pointer is passed as the declared pointer type; a scalar is read in its arg's dtype
// (f32 float, f64 double, i32 int, i64 long long, or KTUNE_DTYPE) and converted to the declared
// type. apply_signature (core/kernel_spec.hpp) has already checked the two agree.
#include "core/kernel_spec.hpp"
#include "core/signature.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace ktune {

[[nodiscard]] std::string host_shim_symbol(std::string_view function);

// The shim's source text; `args` in the declaration's order, dtypes already resolved.
[[nodiscard]] std::string host_shim_source(const Signature& signature,
                                           const std::vector<ArgSpec>& args);

} // namespace ktune
