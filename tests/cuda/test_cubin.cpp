#include "cuda/cubin.hpp"

#include "cuda/cuda_api.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace ktune;

namespace {

// Compiles `source` with nvrtc for sm_90 with ptxas's report; returns {cubin, log}.
std::pair<std::string, std::string> compile(const std::string& source) {
  auto loaded = cuda::load_nvrtc();
  REQUIRE(loaded.ok());
  const cuda::NvrtcApi& api = *loaded.value();
  nvrtcProgram program = nullptr;
  KTUNE_NVRTC(api, nullptr, nvrtcCreateProgram(&program, source.c_str(), "probe.cu", 0, nullptr, nullptr));
  const char* options[] = {"--gpu-architecture=sm_90", "--ptxas-options=-v"};
  KTUNE_NVRTC(api, program, nvrtcCompileProgram(program, 2, options));
  std::size_t size = 0;
  KTUNE_NVRTC(api, program, nvrtcGetCUBINSize(program, &size));
  std::string cubin(size, '\0');
  KTUNE_NVRTC(api, program, nvrtcGetCUBIN(program, cubin.data()));
  std::string log = cuda::program_log(api, program);
  api.nvrtcDestroyProgram(&program);
  return {cubin, log};
}

const cuda::KernelResources* find(const std::vector<cuda::KernelResources>& kernels,
                                  const std::string& name) {
  const auto it = std::find_if(kernels.begin(), kernels.end(), [&](const auto& k) { return k.name == name; });
  return it == kernels.end() ? nullptr : &*it;
}

// Two kernels: one with static shared memory, one with a dynamically indexed local array (a
// stack frame).
const char* const k_source = R"(
extern "C" __global__ void staged(float* a, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? a[i] : 0.0f;
  __syncthreads();
  if (i < n) a[i] = s[255 - threadIdx.x] * 2.0f;
}
extern "C" __global__ void local_array(float* a, const int* idx, int n) {
  float t[64];
  for (int j = 0; j < 64; ++j) t[j] = a[j] * j;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = t[idx[i] & 63];
}
)";

} // namespace

TEST_CASE("resources of a CUBIN: ELF records agree with ptxas's report", "[cuda]") {
  const auto [cubin, log] = compile(k_source);
  auto from_cubin = cuda::read_cubin_kernels(cubin);
  REQUIRE(from_cubin.ok());
  const auto from_log = cuda::parse_ptxas_info(log);
  INFO(log);
  REQUIRE(from_cubin->size() == 2);
  REQUIRE(from_log.size() == 2);

  const auto* staged = find(*from_cubin, "staged");
  const auto* staged_log = find(from_log, "staged");
  REQUIRE(staged != nullptr);
  REQUIRE(staged_log != nullptr);
  CHECK(staged->registers > 0);
  CHECK(staged->registers == staged_log->registers);
  CHECK(staged->shared_bytes == -1); // taken from the report only
  CHECK(staged_log->shared_bytes == 1024);
  CHECK(staged->stack_bytes == 0);
  CHECK(staged_log->spill_store_bytes == 0);
  CHECK(staged->spill_store_bytes == -1); // the CUBIN does not record spills

  const auto* local = find(*from_cubin, "local_array");
  const auto* local_log = find(from_log, "local_array");
  REQUIRE(local != nullptr);
  REQUIRE(local_log != nullptr);
  CHECK(local->stack_bytes >= 256);
  CHECK(local->stack_bytes == local_log->stack_bytes);
  CHECK(local->registers == local_log->registers);
  CHECK(local_log->shared_bytes == 0); // ptxas prints no smem figure without shared memory

  const auto merged = cuda::merge_resources(*from_cubin, from_log);
  const auto* merged_staged = find(merged, "staged");
  REQUIRE(merged_staged != nullptr);
  CHECK(merged_staged->spill_store_bytes == 0);
  CHECK(merged_staged->spill_load_bytes == 0);
  CHECK(merged_staged->registers == staged->registers);
  CHECK(merged_staged->shared_bytes == 1024);
}

TEST_CASE("ptxas report parsing", "[cuda]") {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'gemm' for 'sm_90'\n"
      "ptxas info    : Function properties for gemm\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 128 registers, used 1 barriers, 16384 bytes smem\n"
      "ptxas info    : Function properties for device_fn\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compile time = 8.5 ms\n";
  const auto kernels = cuda::parse_ptxas_info(log);
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].name == "gemm");
  CHECK(kernels[0].registers == 128);
  CHECK(kernels[0].stack_bytes == 16);
  CHECK(kernels[0].spill_store_bytes == 8);
  CHECK(kernels[0].spill_load_bytes == 12);
  CHECK(kernels[0].shared_bytes == 16384);
  CHECK(cuda::parse_ptxas_info("").empty());
  CHECK(cuda::parse_ptxas_info("kernel.cu(3): error: expected a \";\"\n").empty());
}

TEST_CASE("a file that is not a CUBIN is an error naming why", "[cuda]") {
  auto empty = cuda::read_cubin_kernels("");
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.error().message, Catch::Contains("ELF magic"));

  auto [cubin, log] = compile(k_source);
  cubin.resize(cubin.size() / 2); // truncated: section headers lie past the end
  auto truncated = cuda::read_cubin_kernels(cubin);
  REQUIRE_FALSE(truncated.ok());
  CHECK_THAT(truncated.error().message, Catch::Contains("outside the file"));
}

TEST_CASE("resources to and from JSON", "[cuda]") {
  cuda::KernelResources r;
  r.name = "k";
  r.registers = 40;
  r.shared_bytes = 0;
  const auto j = r.to_json();
  CHECK(j.at("registers") == 40);
  CHECK(j.at("spill_store_bytes").is_null());
  const auto back = cuda::KernelResources::from_json(j);
  CHECK(back.name == "k");
  CHECK(back.registers == 40);
  CHECK(back.shared_bytes == 0);
  CHECK(back.spill_store_bytes == -1);
}
