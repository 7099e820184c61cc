// The CPU device backend: registration, aligned caching allocation, statistics, empty_cache,
// host copies, thread safety, and the thread-count hook reaching OpenMP and OpenBLAS.
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "cpu_test_util.h"
#include "opdefs.h"
#include "plugflow/device.h"
#include "plugflow/kernel.h"

#if defined(__SANITIZE_ADDRESS__)
// The sanitizer runtime's live heap bytes (GCC ships no header declaring it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace cpu_test {
namespace {

using plugflow::DeviceBackend;

DeviceBackend& backend() { return plugflow::device_backend(cpu()); }

TEST_F(CpuTest, BackendIsRegistered) {
  DeviceBackend& b = backend();
  EXPECT_EQ(b.type(), plugflow::DeviceType::CPU);
  EXPECT_EQ(b.device_count(), 1);
  EXPECT_EQ(b.current_stream(0), nullptr);
  EXPECT_TRUE(b.unavailable_reason().empty());
}

TEST_F(CpuTest, EveryDocumentedOpHasCpuKernels) {
  // Every defined op with a kernel (core/opdefs/*.yaml).
  std::vector<std::string> ops;
#define PF_X(name, ...) ops.emplace_back(name);
  PF_OPDEFS_BINARY(PF_X)
  PF_OPDEFS_UNARY(PF_X)
  PF_OPDEFS_ACTIVATION(PF_X)
  PF_OPDEFS_TERNARY(PF_X)
  PF_OPDEFS_REDUCTION(PF_X)
  PF_OPDEFS_INDEXED(PF_X)
  PF_OPDEFS_SCAN(PF_X)
  PF_OPDEFS_SOFTMAX(PF_X)
  PF_OPDEFS_MOMENTS(PF_X)
  PF_OPDEFS_KERNEL_DTYPES(PF_X)
#undef PF_X
  const auto kernels = plugflow::registered_kernels();
  for (const std::string& op : ops) {
    int n = 0;
    for (const auto& k : kernels)
      if (k.op == op && k.provider == "cpu" && k.device == plugflow::DeviceType::CPU) ++n;
    EXPECT_GT(n, 0) << op;
    // Every op the catalog knows; the plugin only registers catalog ops.
    EXPECT_NE(plugflow::try_find_op(op), nullptr) << op;
  }
  // Spot-check dtype coverage against PyTorch's: float32 everywhere, float16 for math.
  auto has = [&](const std::string& op, DType dt) {
    for (const auto& k : kernels)
      if (k.op == op && k.provider == "cpu" && k.dtype == dt) return true;
    return false;
  };
  for (DType dt : kAllDTypes) {
    EXPECT_TRUE(has("copy", dt)) << dtype_str(dt);
    EXPECT_TRUE(has("eq", dt)) << dtype_str(dt);
    EXPECT_TRUE(has("sum", dt)) << dtype_str(dt);
  }
  EXPECT_TRUE(has("exp", DType::Float16));
  EXPECT_FALSE(has("exp", DType::Int32));  // promoted to float before the kernel
  EXPECT_FALSE(has("sub", DType::Bool));   // PyTorch refuses bool subtraction
  EXPECT_FALSE(has("bitwise_and", DType::Float32));
  EXPECT_TRUE(has("mm", DType::Int64));
}

TEST_F(CpuTest, RegistersTheDefinedDtypesOfEveryKernelOp) {
  // The ops with schemas of their own (`family: kernel` in core/opdefs/*.yaml) declare the dtypes
  // of the in-tree kernels; the plugin registers exactly those, from the definition or by hand.
  const auto kernels = plugflow::registered_kernels();
#define PF_X(name, cpu_dtypes, cuda_dtypes)                                                   \
  {                                                                                          \
    const std::set<DType> declared = {PF_OPDEFS_UNPAREN cpu_dtypes};                         \
    std::set<DType> registered;                                                              \
    for (const auto& k : kernels)                                                            \
      if (k.op == name && k.provider == "cpu" && k.device == plugflow::DeviceType::CPU)      \
        registered.insert(k.dtype);                                                          \
    EXPECT_EQ(registered, declared) << name;                                                 \
  }
  PF_OPDEFS_KERNEL_DTYPES(PF_X)
#undef PF_X
}

TEST_F(CpuTest, AllocationsAreAlignedAndCounted) {
  DeviceBackend& b = backend();
  const size_t before = b.allocated_bytes(0);
  b.reset_peak(0);
  std::vector<std::pair<void*, size_t>> blocks;
  size_t counted = 0;
  for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{4097}, size_t{5000},
                   size_t{123457}, size_t{1} << 20}) {
    void* p = b.allocate(0, n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    std::memset(p, 0xab, n);  // the whole requested size is usable
    blocks.emplace_back(p, n);
    const size_t now = b.allocated_bytes(0) - before;
    EXPECT_GE(now - counted, n) << "the counter grows by at least the request";
    EXPECT_LE(now - counted, std::max<size_t>(64, n + n / 8 + 64)) << "size classes waste at most 12.5%";
    counted = now;
  }
  EXPECT_EQ(b.peak_allocated_bytes(0), before + counted);
  for (auto [p, n] : blocks) b.deallocate(0, p, n);
  EXPECT_EQ(b.allocated_bytes(0), before);
  EXPECT_EQ(b.peak_allocated_bytes(0), before + counted) << "peak survives frees";
  b.reset_peak(0);
  EXPECT_EQ(b.peak_allocated_bytes(0), before);
}

TEST_F(CpuTest, ZeroByteAllocationsAreDistinctValidPointers) {
  DeviceBackend& b = backend();
  void* p = b.allocate(0, 0);
  void* q = b.allocate(0, 0);
  EXPECT_NE(p, nullptr);
  EXPECT_NE(p, q);
  b.deallocate(0, p, 0);
  b.deallocate(0, q, 0);
}

TEST_F(CpuTest, FreedBlocksAreReusedForTheSameSizeClass) {
  DeviceBackend& b = backend();
  void* p = b.allocate(0, 10000);
  b.deallocate(0, p, 10000);
  void* q = b.allocate(0, 9990);  // same size class (10240)
  EXPECT_EQ(p, q);
  b.deallocate(0, q, 9990);
}

// The bytes of big blocks the process has not given back: 64 MiB is above glibc's largest
// dynamic mmap threshold (32 MiB), so such blocks are always mmapped and mallinfo2().hblkhd
// counts them. AddressSanitizer replaces malloc (mallinfo2 reads 0 there): its count of live
// heap bytes says the same.
size_t big_blocks_held() {
#if defined(__SANITIZE_ADDRESS__)
  return __sanitizer_get_current_allocated_bytes();
#else
  return mallinfo2().hblkhd;
#endif
}

TEST_F(CpuTest, EmptyCacheReturnsMemoryToTheSystem) {
  DeviceBackend& b = backend();
  constexpr size_t kBig = size_t{64} << 20;
  b.empty_cache(0);
  const size_t held0 = big_blocks_held();
  void* p = b.allocate(0, kBig);
  std::memset(p, 1, kBig);
  EXPECT_GE(big_blocks_held(), held0 + kBig);
  b.deallocate(0, p, kBig);
  EXPECT_GE(big_blocks_held(), held0 + kBig) << "a freed block stays cached";
  void* q = b.allocate(0, kBig);
  EXPECT_EQ(p, q) << "and is handed out again";
  b.deallocate(0, q, kBig);
  b.empty_cache(0);
  EXPECT_LT(big_blocks_held(), held0 + kBig) << "empty_cache releases it";
}

TEST_F(CpuTest, ConcurrentAllocationIsThreadSafe) {
  DeviceBackend& b = backend();
  const size_t before = b.allocated_bytes(0);
  auto worker = [&](uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<std::pair<char*, size_t>> live;
    for (int i = 0; i < 20000; ++i) {
      if (live.empty() || gen() % 2) {
        const size_t n = 1 + gen() % 20000;
        char* p = static_cast<char*>(b.allocate(0, n));
        p[0] = static_cast<char>(seed);
        p[n - 1] = static_cast<char>(seed);
        live.emplace_back(p, n);
      } else {
        const size_t k = gen() % live.size();
        auto [p, n] = live[k];
        // Another thread writing into our block would show here.
        ASSERT_EQ(p[0], static_cast<char>(seed));
        ASSERT_EQ(p[n - 1], static_cast<char>(seed));
        b.deallocate(0, p, n);
        live[k] = live.back();
        live.pop_back();
      }
    }
    for (auto [p, n] : live) b.deallocate(0, p, n);
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) threads.emplace_back(worker, t + 1);
  for (auto& t : threads) t.join();
  EXPECT_EQ(b.allocated_bytes(0), before);
}

TEST_F(CpuTest, HostCopiesMoveBytes) {
  DeviceBackend& b = backend();
  std::vector<uint8_t> src(1000), dst(1000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  void* dev = b.allocate(0, src.size());
  void* dev2 = b.allocate(0, src.size());
  b.copy_from_host(0, dev, src.data(), src.size());
  b.copy_on_device(0, dev2, dev, src.size());
  b.copy_to_host(0, dst.data(), dev2, dst.size());
  b.synchronize(0);
  EXPECT_EQ(src, dst);
  b.copy_to_host(0, dst.data(), dev, 0);  // zero bytes: nothing to do, no crash
  b.deallocate(0, dev, src.size());
  b.deallocate(0, dev2, src.size());
}

TEST_F(CpuTest, TensorsLiveOnTheCachingAllocator) {
  DeviceBackend& b = backend();
  const size_t before = b.allocated_bytes(0);
  {
    Tensor t = Tensor::empty({1000}, DType::Float32, cpu());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
    EXPECT_GE(b.allocated_bytes(0), before + 4000);
  }
  EXPECT_EQ(b.allocated_bytes(0), before);
}

// set_num_threads reaches OpenMP (for the calling thread) and OpenBLAS through the hook. The
// libraries are already loaded by the plugin; RTLD_NOLOAD only looks them up.
// One pool: set_num_threads sizes OpenMP's, and OpenBLAS stays single-threaded (blas.h splits
// GEMMs over the OpenMP threads instead of letting OpenBLAS start its own).
TEST_F(CpuTest, SetNumThreadsSizesOpenMPAndKeepsOpenBLASSingleThreaded) {
  void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
  void* blas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(gomp, nullptr) << "the plugin should have loaded libgomp";
  ASSERT_NE(blas, nullptr) << "the plugin should have loaded OpenBLAS";
  auto omp_max = reinterpret_cast<int (*)()>(dlsym(gomp, "omp_get_max_threads"));
  auto blas_threads = reinterpret_cast<int (*)()>(dlsym(blas, "openblas_get_num_threads"));
  ASSERT_NE(omp_max, nullptr);
  ASSERT_NE(blas_threads, nullptr);
  const int old = plugflow::get_num_threads();
  plugflow::set_num_threads(3);
  EXPECT_EQ(omp_max(), 3);
  EXPECT_EQ(blas_threads(), 1);
  // Kernels keep working with any count, including one.
  plugflow::set_num_threads(1);
  Tensor a = make({100000}, DType::Float32, std::vector<double>(100000, 1.0));
  EXPECT_EQ(values(run("sum", {a}, Attrs{{"dims", Shape{0}}, {"keepdim", false}})[0])[0], 100000.0);
  plugflow::set_num_threads(old);
  EXPECT_EQ(omp_max(), old);
  EXPECT_EQ(blas_threads(), 1);
  dlclose(gomp);
  dlclose(blas);
}

// GNU OpenMP hangs in a forked child whose parent ran parallel regions; the plugin makes
// children run single-threaded (DataLoader workers fork).
TEST_F(CpuTest, KernelsRunInAForkedChild) {
  const int64_t n = 1 << 20;
  Tensor a = make({n}, DType::Float32, std::vector<double>(n, 1.0));
  const Attrs attrs{{"dims", Shape{0}}, {"keepdim", false}};
  ASSERT_EQ(values(run("sum", {a}, attrs).at(0))[0], static_cast<double>(n));  // parallel in the parent
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const bool ok = values(run("sum", {a}, attrs).at(0))[0] == static_cast<double>(n) &&
                    values(run("exp", {a}).at(0))[0] == static_cast<double>(std::exp(1.0f));
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  for (int waited_ms = 0; waitpid(pid, &status, WNOHANG) == 0; waited_ms += 10) {
    if (waited_ms > 30000) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "the forked child hung in a kernel";
    }
    usleep(10000);
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace cpu_test
